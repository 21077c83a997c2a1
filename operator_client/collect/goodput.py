"""The goodput account of a run: where every second of every rank went, from its events
(runstore/events.py). Pure: events in, a table out; report.py prints and draws it, collect
writes it into summary.json.

Each rank's time runs from the job's first event to its last (so the categories of all
ranks add up to that wall time times the ranks), split into:

- `pending`: before the rank's first process started (its pod was queued, scheduled,
  pulling its image: pod phases are not recorded yet);
- `startup`: the process before it joins the process group (imports), and after that until
  its first training step (building the model, Lightning's setup, loading the checkpoint);
- `rendezvous`, `restore` (fetching and verifying the checkpoint to resume from);
- `productive`: the training loop's time that went into steps that were kept (the step
  time: forward, backward, optimizer, and the loop's own per-step work), less the parts
  below;
- `data_loading`: the loop waiting for its next batch;
- `checkpoint_stall`: the training thread held by checkpoint saves (the snapshot, waiting
  for the previous save, the agreement on when to save);
- `outputs`: committing the per-rank outputs at the end of each epoch;
- `validation`;
- `wasted_progress`: steps trained again after a restart (beyond the checkpoint the next
  attempt resumed from), costed at the attempt's measured step time;
- `recovery`: from a rank's last event of an attempt to its first of the next (what a
  crash lost since its last recorded window is in here);
- `finish`: after the last step (the final checkpoint, aggregating outputs);
- `idle_at_end`: the rank done before the job's last event;
- `other`: what nothing above explains, shown, never hidden (clock skew between nodes
  shows here too).

Goodput = productive / total. A rank's straggler score is its median step time over the
fastest rank's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..runstore.events import RankEvents

CATEGORIES = (
    "pending", "startup", "rendezvous", "restore", "productive", "data_loading",
    "checkpoint_stall", "outputs", "validation", "wasted_progress", "recovery", "finish",
    "idle_at_end", "other",
)  # fmt: skip


# A window's parts other than the steps themselves, and their categories.
PARTS = {
    "data": "data_loading",
    "stall": "checkpoint_stall",
    "outputs": "outputs",
    "eval": "validation",
}


@dataclass
class RankAccount:
    rank: int
    categories: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    step_times: list[float] = field(default_factory=list)  # each window's mean step time
    straggler: float | None = None

    @property
    def total(self) -> float:
        return sum(self.categories.values())


@dataclass
class Account:
    start: float  # the job's first event (wall clock)
    end: float
    ranks: list[RankAccount]

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def categories(self) -> dict[str, float]:
        return {c: sum(r.categories[c] for r in self.ranks) for c in CATEGORIES}

    @property
    def total(self) -> float:
        return self.wall * len(self.ranks)

    @property
    def goodput(self) -> float:
        return self.categories["productive"] / self.total if self.total > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """summary.json's `goodput`."""
        return {
            "total_s": round(self.total, 3),
            "wall_s": round(self.wall, 3),
            "goodput": round(self.goodput, 4),
            "categories": {k: round(v, 3) for k, v in self.categories.items()},
            "ranks": [
                {
                    "rank": r.rank,
                    "categories": {k: round(v, 3) for k, v in r.categories.items()},
                    "straggler": None if r.straggler is None else round(r.straggler, 3),
                }
                for r in self.ranks
            ],
        }


def account(files: Iterable[RankEvents]) -> Account | None:
    """The account of a run's event files (None: no events at all)."""
    by_rank: dict[int, dict[int, RankEvents]] = {}
    for f in files:
        if f.events:
            by_rank.setdefault(f.rank, {})[f.attempt] = f
    times = [e["t"] for attempts in by_rank.values() for f in attempts.values() for e in f.events]
    if not times:
        return None
    start, end = min(times), max(times)
    ranks = [_rank(rank, attempts, start, end) for rank, attempts in sorted(by_rank.items())]
    medians = {r.rank: statistics.median(r.step_times) for r in ranks if r.step_times}
    fastest = min(medians.values(), default=0.0)
    for r in ranks:
        if r.rank in medians and fastest > 0:
            r.straggler = medians[r.rank] / fastest
    return Account(start, end, ranks)


def _rank(rank: int, attempts: dict[int, RankEvents], start: float, end: float) -> RankAccount:
    out = RankAccount(rank)
    c = out.categories
    order = sorted(attempts)
    c["pending"] = attempts[order[0]].events[0]["t"] - start
    for i, attempt in enumerate(order):
        f = attempts[attempt]
        last = f.events[-1]["t"]
        if i + 1 < len(order):
            c["recovery"] += attempts[order[i + 1]].events[0]["t"] - last
        else:
            c["idle_at_end"] = end - last
        _attempt(f, out, _resumed_at(attempts[order[i + 1]]) if i + 1 < len(order) else None)
    c["other"] += (end - start) - out.total
    return out


def _resumed_at(f: RankEvents) -> int | None:
    first = f.first("first_step")
    return int(first["step"]) if first and first.get("step") is not None else None


def _span(f: RankEvents, begin: str, finish: str) -> tuple[float, float] | None:
    a, b = f.first(begin), f.first(finish)
    return (a["t"], b["t"]) if a and b and b["t"] >= a["t"] else None


def _attempt(f: RankEvents, out: RankAccount, next_resume: int | None) -> None:
    """One attempt's time, from its first event to its last, into `out`."""
    c = out.categories
    began = f.events[0]["t"]
    rendezvous = _span(f, "rendezvous_start", "rendezvous_end")
    restore = _span(f, "restore_start", "restore_end")
    first_step = f.first("first_step")
    windows = f.all("steps")
    joining = rendezvous[1] - rendezvous[0] if rendezvous else 0.0
    restoring = restore[1] - restore[0] if restore else 0.0
    c["rendezvous"] += joining
    c["restore"] += restoring
    if first_step:
        c["startup"] += first_step["t"] - began - joining - restoring
    trained, steps = 0.0, 0
    for w in windows:
        spent = {k: float(w.get(f"{k}_s", 0.0)) for k in PARTS}
        for part, category in PARTS.items():
            c[category] += spent[part]
        productive = (w["t"] - w["start"]) - sum(spent.values())
        c["productive"] += productive
        trained += productive
        steps += int(w["to"]) - int(w["from"])
        if w.get("count"):
            out.step_times.append(float(w.get("train_s", 0.0)) / int(w["count"]))
    if windows:
        exit_event = f.first("exit")
        if exit_event:
            c["finish"] += exit_event["t"] - windows[-1]["t"]
        reached = int(windows[-1]["to"])
        if next_resume is not None and reached > next_resume and steps > 0:
            wasted = min(trained, (reached - next_resume) * trained / steps)
            c["productive"] -= wasted
            c["wasted_progress"] += wasted
