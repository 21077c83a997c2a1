"""The flags several commands share (kubectl's where-flags, -o, --operator, the build
flags), for the grammar (grammar.py), and how the job files given either way settle."""

from __future__ import annotations

import argparse
import os

from ..errors import BadInput
from ..spec.quantities import parse_quantity

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
    try:
        return int(parse_quantity(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def operator(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--operator",
        choices=("pytorchjob", "trainjob"),
        help="render for this operator instead of the file's spec.operator: a PyTorchJob "
        "(training-operator v1.9) or a TrainJob (Kubeflow Trainer v2.3)",
    )


def runtime(cmd: argparse.ArgumentParser) -> None:
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
    cmd.add_argument(
        "--pod-security",
        choices=("baseline", "restricted"),
        help="with --local: admit every pod as a namespace enforcing this Pod Security level "
        "would (default: $KCTL_TRAIN_POD_SECURITY, else baseline)",
    )


def where(cmd: argparse.ArgumentParser) -> None:
    """kubectl's flags for where a job lives."""
    cmd.add_argument("-n", "--namespace", help="namespace (default: the job's, or 'default')")
    cmd.add_argument(
        "--local",
        action="store_true",
        help="the local backend: replicas run as processes on this machine, from the "
        "installed package (no image is pulled); state in $KCTL_TRAIN_HOME (~/.kctl-train). "
        "Without it: the cluster of your kubeconfig",
    )
    cmd.add_argument(
        "--context",
        help="kubeconfig context (default: the current one); with --local, a runtime, Secret "
        "or ConfigMap the job needs and no file gives is read from that cluster",
    )
    cmd.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )


def job_files(cmd: argparse.ArgumentParser, what: str, *, many: bool = False) -> None:
    """The job file(s) as kubectl takes them, `-f/--filename FILE` (repeatable where
    `many`), or as the positional argument(s) they always were; settle() joins them."""
    cmd.add_argument(
        "files" if many else "file", nargs="*" if many else "?", metavar="FILE", help=what
    )
    cmd.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="FILE",
        help="the same, as kubectl takes it" + (" (repeatable)" if many else ""),
    )
    cmd.set_defaults(job_files="many" if many else "one")


def settle(args: argparse.Namespace) -> None:
    """The job files of a command, given either way, into `args.files` (many) or
    `args.file` (one); BadInput naming how when there are none, or two for one."""
    shape = getattr(args, "job_files", None)
    if shape is None:
        return
    if shape == "many":
        args.files = [*args.files, *args.filename]
        if not args.files:
            raise BadInput(f"{args.command}: give the job files: -f job.yaml (or as arguments)")
        return
    given = [f for f in (args.file, *args.filename) if f is not None]
    if len(given) != 1:
        problem = "give the job file" if not given else f"one job file, not {len(given)}"
        raise BadInput(f"{args.command}: {problem}: -f job.yaml (or as the argument)")
    args.file = given[0]


def collect_flags(cmd: argparse.ArgumentParser, to: str, *, renamed: bool = False) -> None:
    """Where collect puts a run and the S3 endpoint it reads from, spelled alike on
    apply, wait and collect; `renamed`: also the hidden spellings apply and wait had
    (--collect-to, --collect-endpoint), kept for a release."""
    cmd.add_argument("--to", metavar="DIR", help=to)
    cmd.add_argument(
        "--endpoint",
        metavar="URL",
        help="the S3 endpoint to collect from here, when the pods' is in-cluster (collect: "
        "also with --from)",
    )
    if renamed:
        cmd.add_argument("--collect-to", dest="to", help=argparse.SUPPRESS)
        cmd.add_argument("--collect-endpoint", dest="endpoint", help=argparse.SUPPRESS)


def output(cmd: argparse.ArgumentParser, choices: tuple[str, ...], help: str) -> None:
    """kubectl's -o: the first choice is the default."""
    cmd.add_argument("-o", "--output", choices=choices, default=choices[0], help=help)


def table_output(cmd: argparse.ArgumentParser) -> None:
    output(cmd, ("text", "yaml", "json"), "a table, or the objects as YAML or JSON")


def force_namespace(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--force-namespace",
        action="store_true",
        help="let -n replace the namespace the job file names",
    )


def checkpoint_choice(text: str) -> str:
    """collect's --checkpoint: last, best or a step."""
    if text in ("last", "best") or text.isdigit():
        return str(int(text)) if text.isdigit() else text
    raise argparse.ArgumentTypeError(f"{text!r}: use last, best or a step number")
