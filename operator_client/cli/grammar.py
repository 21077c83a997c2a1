"""The command-line grammar: every command, its flags and the handler that runs it, as
"module.function" of this package. main.py imports a handler's module only when its
command runs: this is the one place that decides what a command loads, so `--help`,
`--version` and a parse error load no spec, renderer, client or backend."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..contract import FAULTS
from ..version import __version__
from . import flags

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def parser() -> argparse.ArgumentParser:
    """The full grammar of `kctl-train`."""
    top = argparse.ArgumentParser(
        prog="kctl-train",
        description="From one job.yaml to a Kubeflow PyTorchJob and finished checkpoints.",
    )
    top.add_argument("--version", action="version", version=f"kctl-train {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for commands in (_offline, _jobs, _views, _build):
        commands(sub)
    return top


def _offline(sub: SubParsers) -> None:
    """render, validate, schema (spec_commands.py)"""
    cmd = sub.add_parser(
        "render",
        help="print the PyTorchJob for job files (offline)",
        description="Render job files into PyTorchJob manifests. Pure "
        "and offline: same input, byte-identical output.",
    )
    flags.job_files(cmd, "job.yaml files ('-' for stdin)", many=True)
    flags.output(cmd, ("yaml", "json"), "output format (default: yaml)")
    cmd.add_argument(
        "--pods",
        action="store_true",
        help="also emit each replica's pod template as a standalone Pod, for scanners such "
        "as checkov that do not look inside a PyTorchJob (not for applying)",
    )
    target = cmd.add_mutually_exclusive_group()
    target.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write one <name>.yaml (or .json) per job into DIR instead of printing",
    )
    target.add_argument(
        "--check",
        metavar="DIR",
        help="GitOps drift check: exit 1 with a diff when DIR's manifests differ from a "
        "fresh render (missing, changed, or not rendered by any of the files)",
    )
    flags.operator(cmd)
    cmd.set_defaults(handler="spec_commands.render")

    cmd = sub.add_parser(
        "validate",
        help="check job files and report every problem",
        description="Validate job files: every problem at once, with "
        "file:line:column, and the warnings.",
    )
    flags.job_files(cmd, "job.yaml files ('-' for stdin)", many=True)
    flags.output(cmd, ("text", "json"), "text lines on stderr, or a JSON report on stdout")
    flags.operator(cmd)
    cmd.set_defaults(handler="spec_commands.validate")

    cmd = sub.add_parser(
        "schema",
        help="print the JSON schema of job.yaml",
        description="Print the JSON schema of job.yaml, generated from "
        "the spec model (for yaml-language-server and Helm).",
    )
    cmd.add_argument(
        "--helm",
        action="store_true",
        help="the schema of the Helm chart's values instead (charts/kctl-train/values.schema.json)",
    )
    cmd.set_defaults(handler="spec_commands.schema")


def _jobs(sub: SubParsers) -> None:
    """apply, wait, delete, collect, report, doctor, chaos (job_commands.py)"""
    cmd = sub.add_parser(
        "apply",
        help="run a job; --wait follows it, then collects and reports",
        description="Render a job file and run it. With --local the rendered PyTorchJob runs "
        "as local processes with exactly the environment the training-operator gives its "
        "pods; the image is not pulled, the installed package stands in for it. Storage: "
        "--storage, else the spec's (an s3:// store only when it answers now), else "
        "$KCTL_TRAIN_HOME/store. Ctrl-C during --wait stops the job (an emergency "
        "checkpoint is committed); applying again resumes from the newest checkpoint.",
    )
    flags.job_files(cmd, "job.yaml, or a TrainJob object as it is ('-' for stdin)")
    flags.where(cmd)
    flags.force_namespace(cmd)
    cmd.add_argument("--wait", action="store_true", help="follow the job until it ends")
    cmd.add_argument(
        "--follow", action="store_true", help="with --wait: stream every replica's log"
    )
    cmd.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="with --wait: give up waiting after this"
    )
    flags.collect_flags(
        cmd,
        "with --wait: collect into DIR after success (local default: results/<name>/; a "
        "cluster job is collected only when this is given)",
        renamed=True,
    )
    cmd.add_argument(
        "--no-collect", action="store_true", help="with --wait: do not collect after success"
    )
    cmd.add_argument(
        "--storage", metavar="URI", help="with --local: store to this file:// or s3:// URI"
    )
    cmd.add_argument(
        "--force-conflicts",
        action="store_true",
        help="server-side apply: take over fields another manager owns",
    )
    cmd.add_argument(
        "--build",
        nargs="?",
        const=".",
        metavar="DIR",
        help="first build DIR (default: the current directory) onto the job's image and run "
        "that, pinned (`kctl-train build`); with --local the replicas run from its root "
        "filesystem in pod sandboxes",
    )
    flags.add_build_flags(cmd)
    cmd.add_argument(
        "--dry-run",
        choices=("none", "client", "server"),
        default="none",
        help="client: print the manifest only; server: also check it can start, start nothing",
    )
    cmd.add_argument(
        "-o",
        "--output",
        choices=("name", "yaml", "json"),
        help="what to print (default: the job's name; with --dry-run, the object as YAML)",
    )
    flags.operator(cmd)
    flags.runtime(cmd)
    cmd.set_defaults(handler="job_commands.apply")

    cmd = sub.add_parser("wait", help="follow a job to its end (exit 0 on success)")
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    cmd.add_argument("--timeout", type=float, metavar="SECONDS")
    flags.collect_flags(cmd, "collect into DIR after success", renamed=True)
    cmd.set_defaults(handler="job_commands.wait")

    cmd = sub.add_parser(
        "delete", help="stop a job and remove its record (stored checkpoints stay)"
    )
    cmd.add_argument("name", nargs="?", metavar="NAME")
    cmd.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="the job a job file or TrainJob object names (its name and namespace), as "
        "kubectl delete -f takes it",
    )
    flags.where(cmd)
    cmd.add_argument("--ignore-not-found", action="store_true")
    cmd.add_argument(
        "--wait", action="store_true", help="cluster: return once the job and its pods are gone"
    )
    cmd.set_defaults(handler="job_commands.delete")

    cmd = sub.add_parser(
        "collect",
        help="download a run's newest checkpoint, outputs and metrics, verified",
        description="Download the newest committed checkpoint (or all), the aggregated "
        "per-rank outputs (rebuilt when missing), metrics, GPU monitor files and run.json, "
        "verified against their manifests, then write summary.json and the report. "
        "Resumable: files already present with matching checksums are skipped.",
    )
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    flags.collect_flags(cmd, "where results go (default: results/<name>/)")
    cmd.add_argument(
        "--from",
        dest="source",
        metavar="URI",
        help="the job's storage.uri (s3://bucket/prefix or file:///path), without a job record",
    )
    which = cmd.add_mutually_exclusive_group()
    which.add_argument("--all-checkpoints", action="store_true")
    which.add_argument(
        "--checkpoint",
        default="last",
        type=flags.checkpoint_choice,
        metavar="last|best|STEP",
        help="which committed checkpoint: the newest (default), the best by the run's "
        "checkpoint.monitor, or the one of a step",
    )
    cmd.add_argument(
        "--consolidate",
        action="store_true",
        help="also write each collected sharded checkpoint as one model.ckpt (needs torch)",
    )
    cmd.add_argument("--concurrency", type=int, default=16, metavar="N")
    cmd.set_defaults(handler="job_commands.collect_cmd")

    cmd = sub.add_parser(
        "report", help="training curves (PNG) and a text summary of a collected run"
    )
    cmd.add_argument("target", metavar="NAME|DIR", help="a collected directory or results/NAME")
    cmd.set_defaults(handler="job_commands.report")

    cmd = sub.add_parser(
        "doctor",
        help="check a cluster is ready for a job: CRD, namespace, RBAC, Secrets, GPU nodes",
    )
    flags.job_files(cmd, "job.yaml, or a TrainJob object as it is ('-' for stdin)")
    flags.where(cmd)
    flags.force_namespace(cmd)
    flags.operator(cmd)
    flags.runtime(cmd)
    cmd.set_defaults(handler="job_commands.doctor")

    cmd = sub.add_parser(
        "chaos",
        help="rehearse a failure on a local job: kill a replica, cut its network, slow it",
        description="Inject a fault into one replica of a running local job: kill (SIGKILL "
        "to every process of the pod), partition (its link down: no peer, no store), slow "
        "(latency and loss with netem), heal (undo). partition and slow need pod sandboxes "
        "(`kctl-train doctor --local` says whether this machine runs them).",
    )
    cmd.add_argument("name", metavar="NAME")
    cmd.add_argument("action", choices=FAULTS, metavar="|".join(FAULTS))
    cmd.add_argument("replica", metavar="REPLICA", help="master-0, worker-1 (or the pod name)")
    flags.where(cmd)
    cmd.add_argument(
        "--for",
        dest="duration",
        metavar="DURATION",
        help="partition, slow: heal after this long, e.g. 20s (default: until `heal`)",
    )
    cmd.add_argument("--delay", type=int, default=200, metavar="MS", help="slow: latency")
    cmd.add_argument("--loss", type=float, default=0.0, metavar="PERCENT", help="slow: loss")
    cmd.set_defaults(handler="job_commands.chaos")


def _views(sub: SubParsers) -> None:
    """status, goodput, list, logs (view_commands.py)"""
    cmd = sub.add_parser("status", help="a job's conditions and replicas (no NAME: every job)")
    cmd.add_argument("name", nargs="?", metavar="NAME")
    flags.where(cmd)
    flags.table_output(cmd)
    cmd.set_defaults(handler="view_commands.status")

    cmd = sub.add_parser(
        "goodput",
        help="where a job's rank-seconds went so far: training, start-up, stalls, restarts",
    )
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    flags.output(cmd, ("text", "json"), "a table, or the account as JSON")
    cmd.add_argument(
        "--endpoint",
        help="the S3 endpoint to read the store from here (the pods' may be in-cluster)",
    )
    cmd.set_defaults(handler="view_commands.goodput")

    cmd = sub.add_parser("list", help="a table of jobs: name, state, nodes, restarts, age")
    flags.where(cmd)
    flags.table_output(cmd)
    cmd.set_defaults(handler="view_commands.list_cmd")

    cmd = sub.add_parser("logs", help="the replicas' logs, prefixed [master-0], [worker-0]")
    cmd.add_argument("name", metavar="NAME")
    flags.where(cmd)
    cmd.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    cmd.add_argument(
        "--replica", metavar="REPLICA", help="master-0, worker-N or all (default: all)"
    )
    cmd.add_argument(
        "--previous", action="store_true", help="the previous container's log (cluster)"
    )
    cmd.set_defaults(handler="view_commands.logs")


def _build(sub: SubParsers) -> None:
    """build (build_commands.py)"""
    cmd = sub.add_parser(
        "build",
        help="build your code onto the trainer image, push it, print the pinned reference",
        description="Build DIR (your project: installed with pip when it has a pyproject.toml "
        "or setup.py, else copied onto PYTHONPATH) as a layer on the trainer image, tagged "
        "with the hash of everything that goes in. With --repo it is pushed, and the "
        "reference printed is pinned by the digest the registry reports; a tag the registry "
        "has already is neither built nor pushed again. .dockerignore (else .gitignore) "
        "decides what goes in; secrets (.env, keys, credentials, .git) never do.",
    )
    cmd.add_argument(
        "directory", nargs="?", default=".", metavar="DIR", help="default: the current one"
    )
    cmd.add_argument("-f", "--file", metavar="FILE", help="a job file: build on its spec.image")
    flags.add_build_flags(cmd)
    flags.output(cmd, ("name", "json"), "the image reference, or a JSON account of the build")
    cmd.set_defaults(handler="build_commands.build")
