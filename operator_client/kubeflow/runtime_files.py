"""Trainer v2 runtimes given as files: a ClusterTrainingRuntime or TrainingRuntime per YAML
document, from files or directories (`apply --local --runtime PATH`). Kubeflow's shipped
runtimes load as they are; the local backend runs a TrainJob against the one it names
(trainjob_pods.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import trainjob as tj
from .manifest_files import ManifestFileError, documents

RUNTIME_KINDS = (tj.RUNTIME_KIND, "TrainingRuntime")
SUFFIXES = (".yaml", ".yml", ".json")


def load_runtimes(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    """Every runtime in `paths` (a directory: its *.yaml, *.yml and *.json files), by
    name. ManifestFileError for a path that is missing, not YAML, holds something other
    than a runtime, or names a runtime another file names too."""
    found: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for path in paths:
        for file in _files(Path(path)):
            for runtime in _runtimes_in(file):
                name = runtime["metadata"]["name"]
                if name in found:
                    raise ManifestFileError(
                        f"{file}: runtime {name!r} is also defined in {where[name]}; give one"
                    )
                found[name], where[name] = runtime, str(file)
    return found


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise ManifestFileError(f"{path}: a directory without *.yaml, *.yml or *.json files")
        return files
    return [path]


def _runtimes_in(file: Path) -> list[dict[str, Any]]:
    out = []
    for at, doc in documents(file, RUNTIME_KINDS):
        if doc.get("apiVersion") != tj.API_VERSION:
            raise ManifestFileError(
                f"{at}: apiVersion {doc.get('apiVersion')!r}: this runs {tj.API_VERSION} runtimes"
            )
        jobs = (((doc.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "replicatedJobs"
        )
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise ManifestFileError(
                f"{at}: spec.template.spec.replicatedJobs must be a list of replicated Jobs"
            )
        out.append(doc)
    return out
