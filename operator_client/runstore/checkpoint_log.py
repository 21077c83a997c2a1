"""`metrics/checkpoints.csv`: one row per checkpoint save of a run, across its attempts
(rank 0 writes it after each commit): how long training stalled, how long the slowest
writer took, how long the commit waited, how many saves were skipped before it (a save
that came while the previous one was still being written, checkpoint.whenBusy: skip),
and whether it was the emergency save of a SIGTERM. From its rows, budget() says what an
emergency save needs on this job: `apply`, `status` and `report` set it beside the grace
period a preempted pod has, and the runtime, on SIGTERM, does not start a save that the
grace period cannot hold."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from ..spec.save_estimate import MARGIN_SECONDS, against
from ..storage import ObjectStore, StoreError

KEY = "metrics/checkpoints.csv"
# What an emergency save needs, from the rows so far (budget()), as JSON for other tools;
# rank 0 rewrites it after each commit.
BUDGET_KEY = "metrics/save_budget.json"
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


@dataclass(frozen=True)
class SaveBudget:
    """What an emergency save needs on this job, measured: a SIGTERM may come while a
    save is being written (it must finish first: its write and commit), then the
    emergency save itself (snapshot, write, commit), then the agent's exit. Each part
    is the 95th percentile over the saves so far."""

    saves: int
    save_s: float  # one whole save: stall + write + commit (p95)
    in_flight_s: float  # what a save already past its snapshot still needs (p95)
    size_bytes: int  # the newest save's size, every rank's share together
    emergency_save_s: float  # in_flight_s + save_s + MARGIN_SECONDS
    measured: ClassVar[bool] = True  # save_estimate.SaveEstimate's is False

    def needed(self, in_flight: bool) -> float:
        """Seconds from the stop to the exit: the emergency save, after a save in flight
        when there is one."""
        return self.save_s + MARGIN_SECONDS + (self.in_flight_s if in_flight else 0.0)

    def against(self, window: int | None) -> str:
        """In words, beside the seconds a preempted pod has to save (None: not known)."""
        needs = (
            f"an emergency save needs {self.emergency_save_s:.1f}s (a save in flight "
            f"{self.in_flight_s:.1f}s, then one {self.save_s:.1f}s: 95th percentiles of "
            f"{self.saves} saves, and {MARGIN_SECONDS:.0f}s to exit)"
        )
        return against(needs, self.emergency_save_s, window)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def budget(rows: list[dict[str, str]]) -> SaveBudget | None:
    """The budget from the log's rows (None: no save measured yet)."""
    whole, tails, size = [], [], 0
    for row in rows:
        try:
            stall, write, commit = (float(row[f]) for f in ("stall_s", "write_s", "commit_s"))
            size = int(float(row.get("bytes") or 0))
        except (KeyError, ValueError):
            continue
        if all(math.isfinite(v) and v >= 0 for v in (stall, write, commit)):
            whole.append(stall + write + commit)
            tails.append(write + commit)
    if not whole:
        return None
    save, tail = _p95(whole), _p95(tails)
    return SaveBudget(
        saves=len(whole),
        save_s=round(save, 3),
        in_flight_s=round(tail, 3),
        size_bytes=size,
        emergency_save_s=round(tail + save + MARGIN_SECONDS, 3),
    )
