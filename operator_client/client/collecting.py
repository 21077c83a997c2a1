"""Collect a run's store into a directory and write its report: what `handle.collect()`
and `kctl-train collect` do, whichever backend ran the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage import ObjectStore


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
    concurrency: int = 16,
    progress: Any = None,
) -> Collected:
    """Download the run's committed objects into dest (verified, resumable), then write
    summary.json, report.png and report.txt. `job` describes the job in the summary."""
    from ..collect.collect import collect
    from ..collect.report import write

    result = collect(
        store,
        dest,
        all_checkpoints=all_checkpoints,
        concurrency=concurrency,
        progress=progress,
        describe={"job": dict(job)},
    )
    _, _, txt = write(dest)
    return Collected(dest, list(result.problems), txt.read_text(), result.summary)
