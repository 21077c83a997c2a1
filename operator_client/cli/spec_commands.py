"""Offline commands: render, validate, schema, through the Client (which makes no
backend for them: nothing here touches a cluster). Their flags are in grammar.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..client import Client
from ..render import to_json, to_yaml_stream
from ..render.files import drift, write_manifests
from ..spec import SpecError
from . import console


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
    found = Client().validate_files(args.files, operator=args.operator)
    if args.output == "json":
        sys.stdout.write(json.dumps(found.to_json(), indent=2) + "\n")
        return 2 if found.errors else 0
    console.report(found.warnings)
    if found.errors:
        raise SpecError(found.errors)
    print("\n".join(found.lines()))
    return 0


def schema(args: argparse.Namespace) -> int:
    """`kctl-train schema`: the JSON schema of job.yaml (or of the chart's values)."""
    sys.stdout.write(json.dumps(Client().schema(helm=args.helm), indent=2) + "\n")
    return 0
