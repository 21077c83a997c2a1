"""Trainer v2 runtimes given as files: a ClusterTrainingRuntime or TrainingRuntime per YAML
document, from files or directories (`apply --local --runtime PATH`). Kubeflow's shipped
runtimes load as they are; the local backend runs a TrainJob against the one it names
(trainjob_pods.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from . import trainjob as tj

RUNTIME_KINDS = (tj.RUNTIME_KIND, "TrainingRuntime")
SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE = 4 << 20  # far above any runtime; a larger file is not one


class RuntimeFileError(ValueError):
    """A runtime file that cannot be used; the message names the file and what is wrong."""


def load_runtimes(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    """Every runtime in `paths` (a directory: its *.yaml, *.yml and *.json files), by
    name. RuntimeFileError for a path that is missing, not YAML, holds something other
    than a runtime, or names a runtime another file names too."""
    found: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for path in paths:
        for file in _files(Path(path)):
            for runtime in _runtimes_in(file):
                name = runtime["metadata"]["name"]
                if name in found:
                    raise RuntimeFileError(
                        f"{file}: runtime {name!r} is also defined in {where[name]}; give one"
                    )
                found[name], where[name] = runtime, str(file)
    return found


def describe(runtime: Mapping[str, Any]) -> str:
    """`Kind/name` of a runtime, for messages."""
    return f"{runtime.get('kind')}/{runtime['metadata']['name']}"


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise RuntimeFileError(f"{path}: a directory without *.yaml, *.yml or *.json files")
        return files
    if not path.exists():
        raise RuntimeFileError(f"{path}: no such file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise RuntimeFileError(f"{path}: not a regular file")
    return [path]


def _runtimes_in(file: Path) -> list[dict[str, Any]]:
    try:
        with file.open("rb") as fh:
            data = fh.read(MAX_FILE + 1)
    except OSError as exc:
        raise RuntimeFileError(f"{file}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise RuntimeFileError(f"{file}: larger than {MAX_FILE >> 20} MiB, not a runtime")
    try:
        docs = [d for d in yaml.safe_load_all(data.decode("utf-8")) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise RuntimeFileError(f"{file}: not YAML ({str(exc).splitlines()[0]})") from None
    out = []
    for i, doc in enumerate(docs, 1):
        at = f"{file}: document {i}"
        if not isinstance(doc, dict) or doc.get("kind") not in RUNTIME_KINDS:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise RuntimeFileError(f"{at}: kind {kind!r} is not a {' or '.join(RUNTIME_KINDS)}")
        if doc.get("apiVersion") != tj.API_VERSION:
            raise RuntimeFileError(
                f"{at}: apiVersion {doc.get('apiVersion')!r}: this runs {tj.API_VERSION} runtimes"
            )
        if not isinstance((doc.get("metadata") or {}).get("name"), str):
            raise RuntimeFileError(f"{at}: metadata.name is missing")
        jobs = (((doc.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "replicatedJobs"
        )
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise RuntimeFileError(
                f"{at}: spec.template.spec.replicatedJobs must be a list of replicated Jobs"
            )
        out.append(doc)
    return out
