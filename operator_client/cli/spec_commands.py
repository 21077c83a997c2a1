"""Offline commands: render, validate, schema, through the Client (which makes no
backend for them: nothing here touches a cluster). Their flags are in grammar.py."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..client import Client
from ..kubeflow import trainjob as tj
from ..render import to_json, to_yaml_stream
from ..render.files import drift, write_manifests
from ..spec import SpecError
from . import console

KINDS = {"pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}


def render(args: argparse.Namespace) -> int:
    """`kctl-train render`: print or write the PyTorchJob (or TrainJob) of each job file."""
    manifests, warnings = Client().render_files(args.files, operator=args.operator, pods=args.pods)
    console.report(warnings)
    if args.output_dir:
        return _write_dir(Path(args.output_dir), manifests, args.output)
    if args.check:
        return _check_dir(Path(args.check), manifests, args.output)
    if args.output == "yaml":
        sys.stdout.write(to_yaml_stream(manifests))
    elif len(manifests) > 1:
        sys.stdout.write(to_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        sys.stdout.write(to_json(manifests[0]))
    return 0


def _write_dir(directory: Path, manifests: list[dict[str, Any]], fmt: str) -> int:

    try:
        for target in write_manifests(directory, manifests, fmt):
            print(f"{target.stem} written to {target}")
    except OSError as exc:
        console.error(f"cannot write to {directory}: {exc.strerror or exc}")
        return 1
    return 0


def _check_dir(directory: Path, manifests: list[dict[str, Any]], fmt: str) -> int:
    """A unified diff on stdout per drifted manifest; exit 1 on any drift."""

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

    jobs, errors = Client().check_files(args.files, operator=args.operator)
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

    sys.stdout.write(json.dumps(Client().schema(helm=args.helm), indent=2) + "\n")
    return 0
