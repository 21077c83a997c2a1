"""`metrics/checkpoints.csv`: one row per checkpoint save of a run, across its attempts
(rank 0 writes it after each commit): how long training stalled, how long the slowest
writer took, how long the commit waited, how many saves were skipped before it (a save
that came while the previous one was still being written, checkpoint.whenBusy: skip),
and whether it was the emergency save of a SIGTERM. `report` shows it; `apply` compares
the last save with the grace period a preempted job has to write one."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from ..storage import ObjectStore, StoreError

KEY = "metrics/checkpoints.csv"
FIELDS = ["step", "epoch", "attempt", "emergency", "skipped_before", "bytes", "stall_s",
          "write_s", "commit_s"]  # fmt: skip
# The log of a run with a save every minute for a month: far below this.
MAX_BYTES = 16 << 20


def read(store: ObjectStore) -> list[dict[str, str]]:
    """The rows so far ([] when there are none, or the log cannot be read)."""
    try:
        text = store.get_bytes(KEY, MAX_BYTES).decode(errors="replace")
    except StoreError:
        return []
    return [row for row in csv.DictReader(io.StringIO(text)) if row.get("step", "").isdigit()]


def write(store: ObjectStore, rows: Iterable[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    store.put_bytes(KEY, buffer.getvalue().encode())


def save_seconds(row: dict[str, str]) -> float | None:
    """How long one save took from the training thread's stop to its commit."""
    try:
        return sum(float(row[f]) for f in ("stall_s", "write_s", "commit_s"))
    except (KeyError, ValueError):
        return None


def last_save(rows: list[dict[str, str]]) -> tuple[float, bool] | None:
    """The newest emergency save's seconds (what preemption needs), else the newest
    save's; and whether it was an emergency save. None without a row."""
    for wanted in (True, False):
        for row in reversed(rows):
            if wanted and row.get("emergency") != "1":
                continue
            seconds = save_seconds(row)
            if seconds is not None:
                return seconds, wanted
    return None
