"""`kctl-train`: argument parsing and dispatch. Handlers live in the command modules.

Exit codes: errors.py (0 success, 1 failed, 2 bad input, 130 Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..contract import FAULTS
from ..errors import EXIT_INTERRUPTED, EXIT_OK
from ..version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar."""
    parser = argparse.ArgumentParser(
        prog="kctl-train",
        description="From one job.yaml to a Kubeflow PyTorchJob and finished checkpoints.",
    )
    parser.add_argument("--version", action="version", version=f"kctl-train {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser(
        "render",
        help="print the PyTorchJob for job files (offline)",
        description="Render job files into PyTorchJob manifests. Pure "
        "and offline: same input, byte-identical output.",
    )
    render.add_argument("files", nargs="+", metavar="FILE", help="job.yaml files ('-' for stdin)")
    _output(render, ("yaml", "json"), "output format (default: yaml)")
    render.add_argument(
        "--pods",
        action="store_true",
        help="also emit each replica's pod template as a standalone Pod, for scanners such "
        "as checkov that do not look inside a PyTorchJob (not for applying)",
    )
    target = render.add_mutually_exclusive_group()
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
    _operator(render)
    render.set_defaults(handler="render")

    validate = sub.add_parser(
        "validate",
        help="check job files and report every problem",
        description="Validate job files: every problem at once, with "
        "file:line:column, and the warnings.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="job.yaml files ('-' for stdin)")
    _output(validate, ("text", "json"), "text lines on stderr, or a JSON report on stdout")
    _operator(validate)
    validate.set_defaults(handler="validate")

    schema = sub.add_parser(
        "schema",
        help="print the JSON schema of job.yaml",
        description="Print the JSON schema of job.yaml, generated from "
        "the spec model (for yaml-language-server and Helm).",
    )
    schema.add_argument(
        "--helm",
        action="store_true",
        help="the schema of the Helm chart's values instead (charts/kctl-train/values.schema.json)",
    )
    schema.set_defaults(handler="schema")
    _job_commands(sub)
    _build_command(sub)
    return parser


def _build_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    build = sub.add_parser(
        "build",
        help="build your code onto the trainer image, push it, print the pinned reference",
        description="Build DIR (your project: installed with pip when it has a pyproject.toml "
        "or setup.py, else copied onto PYTHONPATH) as a layer on the trainer image, tagged "
        "with the hash of everything that goes in. With --repo it is pushed, and the "
        "reference printed is pinned by the digest the registry reports; a tag the registry "
        "has already is neither built nor pushed again. .dockerignore (else .gitignore) "
        "decides what goes in; secrets (.env, keys, credentials, .git) never do.",
    )
    build.add_argument(
        "directory", nargs="?", default=".", metavar="DIR", help="default: the current one"
    )
    build.add_argument("-f", "--file", metavar="FILE", help="a job file: build on its spec.image")
    add_build_flags(build)
    _output(build, ("name", "json"), "the image reference, or a JSON account of the build")
    build.set_defaults(handler="build")


REPO_ENV = "KCTL_TRAIN_IMAGE_REPO"


def add_build_flags(cmd: argparse.ArgumentParser) -> None:
    """The flags `build` and `apply --build` share."""
    cmd.add_argument(
        "--base",
        metavar="IMAGE",
        help="the image to build on: any with kctl-train-runtime installed (default: the "
        "job's spec.image)",
    )
    cmd.add_argument(
        "--repo",
        metavar="REPOSITORY",
        default=os.environ.get(REPO_ENV),
        help=f"push to this repository, e.g. ghcr.io/acme/train (default: ${REPO_ENV}); "
        "without one the image stays on this machine",
    )
    cmd.add_argument(
        "--builder",
        choices=("docker", "podman", "buildah"),
        help="default: docker where an engine answers, else podman, else buildah",
    )
    cmd.add_argument(
        "--registry-auth",
        metavar="FILE",
        help="credentials in Docker's config.json format (default: $REGISTRY_AUTH_FILE, "
        "then ~/.docker/config.json)",
    )
    cmd.add_argument(
        "--max-size",
        type=size,
        metavar="SIZE",
        help="refuse a workspace bigger than this (default: 512Mi)",
    )
    cmd.add_argument(
        "--allow-secret",
        action="append",
        default=[],
        metavar="PATH",
        help="ship this file (relative to the directory) although its content looks like a "
        "secret (repeatable)",
    )


def size(text: str) -> int:
    """A Kubernetes quantity (512Mi, 2Gi, 1000000) in bytes."""
    from ..spec.units import parse_quantity  # only when the flag is given

    try:
        return int(parse_quantity(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _operator(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--operator",
        choices=("pytorchjob", "trainjob"),
        help="render for this operator instead of the file's spec.operator: a PyTorchJob "
        "(training-operator v1.9) or a TrainJob (Kubeflow Trainer v2.3)",
    )


def _runtime(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--runtime",
        action="append",
        metavar="PATH",
        help="with --local: a Trainer v2 runtime file (or a directory of them) a TrainJob may "
        "name, e.g. Kubeflow's torch-distributed; repeatable (kctl-train's own is built in)",
    )
    for kind in ("secret", "configmap"):
        cmd.add_argument(
            f"--{kind}",
            action="append",
            metavar="FILE",
            help=f"with --local: a {kind} manifest (kubectl get {kind} NAME -o yaml) the pods "
            "read in env and volumes; repeatable",
        )


def _where(cmd: argparse.ArgumentParser) -> None:
    """kubectl's flags for where a job lives."""
    cmd.add_argument("-n", "--namespace", help="namespace (default: the job's, or 'default')")
    cmd.add_argument(
        "--local",
        action="store_true",
        help="the local backend: replicas run as processes on this machine, from the "
        "installed package (no image is pulled); state in $KCTL_TRAIN_HOME (~/.kctl-train). "
        "Without it: the cluster of your kubeconfig",
    )
    cmd.add_argument("--context", help="kubeconfig context (default: the current one)")
    cmd.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )


def _output(cmd: argparse.ArgumentParser, choices: tuple[str, ...], help: str) -> None:
    """kubectl's -o: the first choice is the default."""
    cmd.add_argument("-o", "--output", choices=choices, default=choices[0], help=help)


def _table_output(cmd: argparse.ArgumentParser) -> None:
    _output(cmd, ("text", "yaml", "json"), "a table, or the objects as YAML or JSON")


def _force_namespace(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--force-namespace",
        action="store_true",
        help="let -n replace the namespace the job file names",
    )


def _job_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    apply = sub.add_parser(
        "apply",
        help="run a job; --wait follows it, then collects and reports",
        description="Render a job file and run it. With --local the rendered PyTorchJob runs "
        "as local processes with exactly the environment the training-operator gives its "
        "pods; the image is not pulled, the installed package stands in for it. Storage: "
        "--storage, else the spec's (an s3:// store only when it answers now), else "
        "$KCTL_TRAIN_HOME/store. Ctrl-C during --wait stops the job (an emergency "
        "checkpoint is committed); applying again resumes from the newest checkpoint.",
    )
    apply.add_argument("file", metavar="FILE", help="job.yaml ('-' for stdin)")
    _where(apply)
    _force_namespace(apply)
    apply.add_argument("--wait", action="store_true", help="follow the job until it ends")
    apply.add_argument(
        "-f", "--follow", action="store_true", help="with --wait: stream every replica's log"
    )
    apply.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="with --wait: give up waiting after this"
    )
    apply.add_argument(
        "--collect-to",
        metavar="DIR",
        help="with --wait: collect into DIR after success (local default: results/<name>/; "
        "a cluster job is collected only when this is given)",
    )
    apply.add_argument(
        "--collect-endpoint",
        metavar="URL",
        help="S3 endpoint for collecting from here, when the pods' endpoint is in-cluster",
    )
    apply.add_argument(
        "--no-collect", action="store_true", help="with --wait: do not collect after success"
    )
    apply.add_argument(
        "--storage", metavar="URI", help="with --local: store to this file:// or s3:// URI"
    )
    apply.add_argument(
        "--force-conflicts",
        action="store_true",
        help="server-side apply: take over fields another manager owns",
    )
    apply.add_argument(
        "--build",
        nargs="?",
        const=".",
        metavar="DIR",
        help="first build DIR (default: the current directory) onto the job's image and run "
        "that, pinned (`kctl-train build`); with --local the replicas run from its root "
        "filesystem in pod sandboxes",
    )
    add_build_flags(apply)
    apply.add_argument(
        "--dry-run",
        choices=("none", "client", "server"),
        default="none",
        help="client: print the manifest only; server: also check it can start, start nothing",
    )
    _output(apply, ("name", "yaml", "json"), "what to print")
    _operator(apply)
    _runtime(apply)
    apply.set_defaults(handler="apply")

    status = sub.add_parser("status", help="a job's conditions and replicas (no NAME: every job)")
    status.add_argument("name", nargs="?", metavar="NAME")
    _where(status)
    _table_output(status)
    status.set_defaults(handler="status")

    logs = sub.add_parser("logs", help="the replicas' logs, prefixed [master-0], [worker-0]")
    logs.add_argument("name", metavar="NAME")
    _where(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    logs.add_argument(
        "--replica", metavar="REPLICA", help="master-0, worker-N or all (default: all)"
    )
    logs.add_argument(
        "--previous", action="store_true", help="the previous container's log (cluster)"
    )
    logs.set_defaults(handler="logs")

    delete = sub.add_parser(
        "delete", help="stop a job and remove its record (stored checkpoints stay)"
    )
    delete.add_argument("name", metavar="NAME")
    _where(delete)
    delete.add_argument("--ignore-not-found", action="store_true")
    delete.add_argument(
        "--wait", action="store_true", help="cluster: return once the job and its pods are gone"
    )
    delete.set_defaults(handler="delete")

    chaos = sub.add_parser(
        "chaos",
        help="rehearse a failure on a local job: kill a replica, cut its network, slow it",
        description="Inject a fault into one replica of a running local job: kill (SIGKILL "
        "to every process of the pod), partition (its link down: no peer, no store), slow "
        "(latency and loss with netem), heal (undo). partition and slow need pod sandboxes "
        "(`kctl-train doctor --local` says whether this machine runs them).",
    )
    chaos.add_argument("name", metavar="NAME")
    chaos.add_argument("action", choices=FAULTS, metavar="|".join(FAULTS))
    chaos.add_argument("replica", metavar="REPLICA", help="master-0, worker-1 (or the pod name)")
    _where(chaos)
    chaos.add_argument(
        "--for",
        dest="duration",
        metavar="DURATION",
        help="partition, slow: heal after this long, e.g. 20s (default: until `heal`)",
    )
    chaos.add_argument("--delay", type=int, default=200, metavar="MS", help="slow: latency")
    chaos.add_argument("--loss", type=float, default=0.0, metavar="PERCENT", help="slow: loss")
    chaos.set_defaults(handler="chaos")

    collect = sub.add_parser(
        "collect",
        help="download a run's newest checkpoint, outputs and metrics, verified",
        description="Download the newest committed checkpoint (or all), the aggregated "
        "per-rank outputs (rebuilt when missing), metrics, GPU monitor files and run.json, "
        "verified against their manifests, then write summary.json and the report. "
        "Resumable: files already present with matching checksums are skipped.",
    )
    collect.add_argument("name", metavar="NAME")
    _where(collect)
    collect.add_argument("--to", metavar="DIR", help="where results go (default: results/<name>/)")
    collect.add_argument(
        "--from",
        dest="source",
        metavar="URI",
        help="the job's storage.uri (s3://bucket/prefix or file:///path), without a job record",
    )
    collect.add_argument(
        "--endpoint",
        metavar="URL",
        help="S3 endpoint: with --from, or instead of the job's (an in-cluster one)",
    )
    collect.add_argument("--all-checkpoints", action="store_true")
    collect.add_argument(
        "--consolidate",
        action="store_true",
        help="also write each collected sharded checkpoint as one model.ckpt (needs torch)",
    )
    collect.add_argument("--concurrency", type=int, default=16, metavar="N")
    collect.set_defaults(handler="collect_cmd")

    listing = sub.add_parser("list", help="a table of jobs: name, state, nodes, restarts, age")
    _where(listing)
    _table_output(listing)
    listing.set_defaults(handler="list_cmd")

    wait = sub.add_parser("wait", help="follow a job to its end (exit 0 on success)")
    wait.add_argument("name", metavar="NAME")
    _where(wait)
    wait.add_argument("--timeout", type=float, metavar="SECONDS")
    wait.add_argument("--collect-to", metavar="DIR", help="collect into DIR after success")
    wait.add_argument("--collect-endpoint", metavar="URL", help="S3 endpoint for collecting")
    wait.set_defaults(handler="wait")

    doctor = sub.add_parser(
        "doctor",
        help="check a cluster is ready for a job: CRD, namespace, RBAC, Secrets, GPU nodes",
    )
    doctor.add_argument("file", metavar="FILE", help="job.yaml ('-' for stdin)")
    _where(doctor)
    _force_namespace(doctor)
    _operator(doctor)
    _runtime(doctor)
    doctor.set_defaults(handler="doctor")

    report = sub.add_parser(
        "report", help="training curves (PNG) and a text summary of a collected run"
    )
    report.add_argument("target", metavar="NAME|DIR", help="a collected directory or results/NAME")
    report.set_defaults(handler="report")


VIEW_COMMANDS = ("status", "list_cmd", "logs", "delete")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kctl-train` console script."""
    args = build_parser().parse_args(argv)
    # Imported after parsing, so --help and --version need no spec machinery.
    from ..errors import KctlTrainError
    from . import console

    if args.handler in ("render", "validate", "schema"):
        from . import spec_commands as commands
    elif args.handler == "build":
        from . import build_commands as commands  # type: ignore[no-redef]
    elif args.handler in VIEW_COMMANDS:
        from . import view_commands as commands  # type: ignore[no-redef]
    else:
        from . import job_commands as commands  # type: ignore[no-redef]
    try:
        code: int = getattr(commands, args.handler)(args)
    except KctlTrainError as exc:
        issues = getattr(exc, "issues", None)  # a SpecError: one line per problem
        if issues is not None:
            console.report(issues)
        else:
            console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `kctl-train render job.yaml | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
