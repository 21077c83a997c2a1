"""Collect a run's store into a directory and write its report: what `handle.collect()`
and `kctl-train collect` do, whichever backend ran the job. A sharded checkpoint is also
written as one file by the consolidation the caller gives (the client's reads it with
torch: collect never imports the runtime)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runstore.checkpoints import DCP, MODEL_FILE
from ..runstore.goodput import PodTimes
from ..storage import ObjectStore

# Where a job's results go when no directory is given (relative to the working directory).
RESULTS = Path("results")
# A sharded checkpoint's directory and the one file to write it as; returns that file.
Consolidate = Callable[[Path, Path], Path]


def results_dir(name: str) -> Path:
    """The default directory of a job's collected results: results/<name>/."""
    return RESULTS / name


@dataclass(frozen=True)
class Collected:
    """Where the results went, the summary's problems (empty: complete and verified),
    and the report's text."""

    dest: Path
    problems: list[str]
    report: str
    summary: Mapping[str, Any]


def collect_run(
    store: ObjectStore,
    dest: Path,
    job: Mapping[str, Any],
    *,
    all_checkpoints: bool = False,
    checkpoint: str = "last",
    consolidate: Consolidate | None = None,
    concurrency: int = 16,
    progress: Any = None,
    pods: Sequence[PodTimes] = (),
) -> Collected:
    """Download the run's committed objects into dest (verified, resumable), then write
    summary.json, report.png and report.txt. `job` describes the job in the summary;
    `pods`, when its pods made, bound and started (for the goodput account).
    `consolidate`: each sharded checkpoint collected is also written as one model.ckpt."""
    from .collect import SUMMARY, collect
    from .report import write

    result = collect(
        store,
        dest,
        all_checkpoints=all_checkpoints,
        checkpoint=checkpoint,
        concurrency=concurrency,
        progress=progress,
        describe={"job": dict(job)},
        pods=pods,
    )
    if consolidate is not None:
        consolidate_all(dest, result.summary, consolidate)
        (dest / SUMMARY).write_text(json.dumps(result.summary, indent=2, sort_keys=True) + "\n")
    _, _, txt = write(dest)
    return Collected(dest, list(result.problems), txt.read_text(), result.summary)


def consolidate_all(dest: Path, summary: Mapping[str, Any], consolidate: Consolidate) -> None:
    """Each collected sharded checkpoint also as one file any Lightning loads, recorded
    in the summary's entry of it."""
    for entry in summary["checkpoints"]:
        if entry.get("format") == DCP:
            target = consolidate(dest / entry["path"], dest / entry["path"] / MODEL_FILE)
            entry["consolidated"] = str(target.relative_to(dest))
