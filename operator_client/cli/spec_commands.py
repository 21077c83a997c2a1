"""Offline commands: render, validate, schema. Nothing here touches a cluster. The spec
and the renderer are imported when a command runs (the parser is built for every
command, --help included)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import BadInput
from . import console, flags

KINDS = {"pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}


def render(args: argparse.Namespace) -> int:
    """`kctl-train render`: print or write the PyTorchJob (or TrainJob) of each job file."""
    from ..render import render_admitted, to_json, to_yaml, to_yaml_stream
    from ..spec import SpecError
    from ..spec.loader import load_files

    jobs, errors = load_files(args.files, sys.stdin, args.operator)
    console.report([w for j in jobs for w in j.warnings])
    if errors:
        raise SpecError(errors)
    manifests = [render_admitted(j.job, j.source) for j in jobs]
    if args.pods:
        from ..render.pods import replica_pods

        if any(m["kind"] != "PyTorchJob" for m in manifests):
            raise BadInput(
                "--pods: a TrainJob's pods come from its runtime and patches; scan "
                "manifests/trainer-v2/cluster-training-runtime.yaml and the TrainJob instead"
            )

        manifests = [doc for m in manifests for doc in (m, *replica_pods(m))]
    text = to_json if args.output == "json" else to_yaml
    if args.output_dir:
        return _write_dir(Path(args.output_dir), manifests, args.output)
    if args.check:
        return _check_dir(Path(args.check), manifests, args.output)
    if args.output == "json" and len(manifests) > 1:
        sys.stdout.write(to_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    elif args.output == "json":
        sys.stdout.write(text(manifests[0]))
    else:
        sys.stdout.write(to_yaml_stream(manifests))
    return 0


def _write_dir(directory: Path, manifests: list[dict[str, Any]], fmt: str) -> int:
    from ..render.files import write_manifests

    try:
        for target in write_manifests(directory, manifests, fmt):
            print(f"{target.stem} written to {target}")
    except OSError as exc:
        console.error(f"cannot write to {directory}: {exc.strerror or exc}")
        return 1
    return 0


def _check_dir(directory: Path, manifests: list[dict[str, Any]], fmt: str) -> int:
    """A unified diff on stdout per drifted manifest; exit 1 on any drift."""
    from ..render.files import drift

    found = drift(directory, manifests, fmt)
    for path in found.missing:
        print(f"{path}: missing (kctl-train render --output-dir {directory} writes it)")
    sys.stdout.writelines(found.diffs)
    for path in found.stale:
        print(f"{path}: not rendered by any of the job files (stale?)")
    if found.count:
        console.error(f"{found.count} manifest(s) in {directory} differ from a fresh render")
        return 1
    print(f"{found.matched} manifest(s) in {directory} match a fresh render")
    return 0


def validate(args: argparse.Namespace) -> int:
    """`kctl-train validate`: every problem of every file, in text or JSON."""
    from ..kubeflow import trainjob as tj
    from ..spec import SpecError
    from ..spec.loader import load_files

    jobs, errors = load_files(args.files, sys.stdin, args.operator)
    warnings = [w for j in jobs for w in j.warnings]
    if args.output == "json":
        report = {
            "valid": not errors,
            "jobs": [
                {
                    "file": j.source,
                    "name": j.job.metadata.name,
                    "namespace": j.job.metadata.namespace,
                }
                for j in jobs
            ],
            "issues": [
                asdict(i)
                for i in sorted(errors + warnings, key=lambda i: (i.source, i.line, i.column))
            ],
        }
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 2 if errors else 0
    console.report(warnings)
    if errors:
        raise SpecError(errors)
    for loaded in jobs:
        job = loaded.job
        nodes = (
            f"{job.min_nodes}-{job.max_nodes} nodes (elastic)"
            if job.elastic
            else f"{job.max_nodes} node{'s' if job.max_nodes > 1 else ''}"
        )
        gpus = job.spec.resources.gpus
        hardware = f"{gpus} x {job.spec.resources.gpu_resource}" if gpus else "CPU"
        runtime = (
            f" of runtime {tj.RUNTIME_KIND}/{tj.RUNTIME_NAME}"
            if job.spec.operator == "trainjob"
            else ""
        )
        print(
            f"{loaded.source}: valid: {job.metadata.namespace}/{job.metadata.name}, "
            f"{nodes}, {hardware} per node, as a {KINDS[job.spec.operator]}{runtime}"
        )
    return 0


def schema(args: argparse.Namespace) -> int:
    """`kctl-train schema`: the JSON schema of job.yaml (or of the chart's values)."""
    if args.helm:
        from ..render.helm import values_schema

        sys.stdout.write(json.dumps(values_schema(), indent=2) + "\n")
        return 0
    from ..spec.schema import job_schema

    sys.stdout.write(json.dumps(job_schema(), indent=2) + "\n")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """render, validate, schema"""
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
    cmd.set_defaults(handler=render)

    cmd = sub.add_parser(
        "validate",
        help="check job files and report every problem",
        description="Validate job files: every problem at once, with "
        "file:line:column, and the warnings.",
    )
    flags.job_files(cmd, "job.yaml files ('-' for stdin)", many=True)
    flags.output(cmd, ("text", "json"), "text lines on stderr, or a JSON report on stdout")
    flags.operator(cmd)
    cmd.set_defaults(handler=validate)

    cmd = sub.add_parser(
        "schema",
        help="print the JSON schema of job.yaml",
        description="Print the JSON schema of job.yaml, generated from "
        "the spec model (for yaml-language-server and Helm).",
    )
    cmd.add_argument(
        "--helm",
        action="store_true",
        help="the schema of the Helm chart's values instead (charts/kctl-train/values.cmd.json)",
    )
    cmd.set_defaults(handler=schema)
