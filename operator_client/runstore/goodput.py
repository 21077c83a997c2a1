"""The goodput account of a run: where every second of every rank went, from its events
(runstore/events.py). Pure: events in, a table out; report.py prints and draws it, collect
writes it into summary.json.

Each rank's time runs from the job's first event to its last (so the categories of all
ranks add up to that wall time times the ranks), split into:

- `pending`: before the rank's pod existed (the controllers making it), or, where the
  backend did not say when its pod was made, everything before its first process;
- `queued`: the pod made, not yet bound to a node (the scheduler, Kueue, a full
  cluster); locally, where there is no scheduler, none;
- `image_pull`: the pod bound, waiting for its images (the kubelet's Pulled events, where
  the backend still has them: a cluster keeps events an hour; none locally);
- `container_start`: the rest until its process started (volumes, the container; an
  image pull the backend could not tell);
- `startup`: the pod's torchrun agent importing torch and Lightning and checking the store
  (where its workers are forked from it, which record when it began), the worker before
  it joins the process group, and after that until its first training step (building the
  model, Lightning's setup, loading the checkpoint);
- `rendezvous` (the agent waiting for the other pods, then the worker joining the process
  group), `restore` (fetching and verifying the checkpoint to resume from);
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

What a SIGTERM did in an attempt (rank 0's `sigterm` and `emergency_commit` events) is
kept beside it: `status` and the report say whether the emergency save committed, was cut
by SIGKILL, or was not started because it could not fit the grace period.

Goodput = productive / total. A rank's straggler score is its median step time over the
fastest rank's. Each attempt is summed too (its span, the step it resumed from and the one
it reached, the steps the next attempt redid, its ranks' categories), for the report's
timeline.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..untrusted import is_finite_number
from .events import RankEvents

CATEGORIES = (
    "pending", "queued", "image_pull", "container_start", "startup", "rendezvous", "restore",
    "productive", "data_loading", "checkpoint_stall", "outputs", "validation",
    "wasted_progress", "recovery", "finish", "idle_at_end", "other",
)  # fmt: skip


# A window's parts other than the steps themselves, and their categories.
PARTS = {
    "data": "data_loading",
    "stall": "checkpoint_stall",
    "outputs": "outputs",
    "eval": "validation",
}


@dataclass(frozen=True)
class PodTimes:
    """When a backend saw one pod made, bound and its container first started (epoch
    seconds, None where not known)."""

    name: str
    created: float | None = None
    scheduled: float | None = None
    started: float | None = None
    image_pull_s: float | None = None  # how long it waited for its images


def pod_of(host: str, pods: Iterable[PodTimes]) -> PodTimes | None:
    """The pod a process ran in, by the hostname it recorded: a pod's hostname is its
    name (PyTorchJob, local), or its name less JobSet's random suffix (TrainJob)."""
    return next((p for p in pods if p.name == host or p.name.startswith(host + "-")), None)


@dataclass
class RankAccount:
    rank: int
    categories: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    step_times: list[float] = field(default_factory=list)  # each window's mean step time
    straggler: float | None = None

    @property
    def total(self) -> float:
        return sum(self.categories.values())


@dataclass(frozen=True)
class Preemption:
    """What a SIGTERM did in one attempt, as its rank 0 recorded it."""

    step: int  # where training stopped
    saving: bool  # an emergency save of `step` was started
    saved_before: bool  # `step` had its checkpoint already
    committed: int | None  # the step of the emergency commit (None: none recorded)
    needed_s: float | None  # what an emergency save needs here (None: not measured yet)
    left_s: float  # of the grace period, at the decision
    grace_s: float | None

    @classmethod
    def of(cls, f: RankEvents) -> Preemption | None:
        """From rank 0's events of an attempt (None: no SIGTERM stopped it)."""
        stop, commit = f.first("sigterm"), f.first("emergency_commit")
        if stop is None:
            return None
        return cls.from_json({**stop, "committed": commit["step"] if commit else None})

    @classmethod
    def from_json(cls, value: Any) -> Preemption | None:
        """From its JSON (an event a pod wrote, or summary.json), None where the numbers
        it needs are not numbers; an optional one that is not is taken as unknown."""
        if not isinstance(value, dict):
            return None
        step, left = value.get("step"), value.get("left_s")
        if not (is_finite_number(step) and is_finite_number(left)):
            return None

        def number(name: str) -> float | None:
            found = value.get(name)
            return float(found) if is_finite_number(found) else None

        committed = number("committed")
        return cls(
            step=int(step),
            saving=value.get("saving") is True,
            saved_before=value.get("saved_before") is True,
            committed=None if committed is None else int(committed),
            needed_s=number("needed_s"),
            left_s=float(left),
            grace_s=number("grace_s"),
        )

    def words(self) -> str:
        """In a line: what the SIGTERM did to the work since the last checkpoint."""
        grace = f" of the {self.grace_s:.0f}s grace period" if self.grace_s is not None else ""
        said = f"SIGTERM at step {self.step}: "
        if self.saved_before or (self.saving and self.committed == self.step):
            return said + "its emergency checkpoint committed, nothing lost"
        if self.saving:
            return said + (
                "the emergency save did not commit (SIGKILL cut it, or a peer was lost "
                "before its part); the newest committed checkpoint stands, the steps since "
                "it are trained again"
            )
        needs = f"it needs about {self.needed_s:.1f}s, " if self.needed_s is not None else ""
        return said + (
            f"no emergency save started ({needs}{max(0.0, self.left_s):.1f}s were left"
            f"{grace}): the newest committed checkpoint stands whole, the steps since it "
            "are trained again (a longer grace period or more frequent saves keep them)"
        )


@dataclass
class AttemptAccount:
    """One attempt of the whole job: from its first rank's first event to its last rank's
    last, the categories of its ranks' time within that (summed over ranks; `pending`,
    `recovery` and `idle_at_end` lie between attempts and are the job's), where it resumed
    and how far it got."""

    attempt: int
    start: float  # wall clock
    end: float
    resumed_from: int | None  # the step it began at (None: it never reached a step)
    reached: int | None  # the last step it recorded
    wasted_steps: int = 0  # steps past the checkpoint the next attempt resumed from
    preemption: Preemption | None = None
    categories: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))


@dataclass
class Account:
    start: float  # the job's first event (wall clock)
    end: float
    ranks: list[RankAccount]
    attempts: list[AttemptAccount] = field(default_factory=list)

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
        """summary.json's `goodput` (times of attempts in seconds from the job's start)."""
        return {
            "total_s": round(self.total, 3),
            "wall_s": round(self.wall, 3),
            "goodput": round(self.goodput, 4),
            "categories": _rounded(self.categories),
            "ranks": [
                {
                    "rank": r.rank,
                    "categories": _rounded(r.categories),
                    "straggler": None if r.straggler is None else round(r.straggler, 3),
                }
                for r in self.ranks
            ],
            "attempts": [
                {
                    "attempt": a.attempt,
                    "start_s": round(a.start - self.start, 3),
                    "end_s": round(a.end - self.start, 3),
                    "resumed_from": a.resumed_from,
                    "reached": a.reached,
                    "wasted_steps": a.wasted_steps,
                    "preemption": None if a.preemption is None else asdict(a.preemption),
                    "categories": _rounded(a.categories),
                }
                for a in self.attempts
            ],
        }


def preemption_line(found: Account) -> str | None:
    """The newest attempt's SIGTERM in words, with where the next attempt resumed (None:
    no attempt was stopped by one)."""
    stopped = [a for a in found.attempts if a.preemption is not None]
    if not stopped:
        return None
    a = stopped[-1]
    assert a.preemption is not None
    later = [b for b in found.attempts if b.attempt > a.attempt and b.resumed_from is not None]
    said = f"attempt {a.attempt}: {a.preemption.words()}"
    return said + (f"; attempt {later[0].attempt} resumed from step {later[0].resumed_from}"
                   if later else "")  # fmt: skip


def _rounded(categories: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in categories.items()}


def account(files: Iterable[RankEvents], pods: Iterable[PodTimes] = ()) -> Account | None:
    """The account of a run's event files (None: no events at all); `pods`, where the
    backend knows them, split each rank's time before its first process."""
    by_rank: dict[int, dict[int, RankEvents]] = {}
    for f in files:
        if f.events:
            by_rank.setdefault(f.rank, {})[f.attempt] = f
    times = [e["t"] for attempts in by_rank.values() for f in attempts.values() for e in f.events]
    if not times:
        return None
    before = {
        rank: _before(attempts[min(attempts)], list(pods)) for rank, attempts in by_rank.items()
    }
    made = [b[0] for b in before.values() if b[0] is not None]  # each pod's creation
    start = min([*times, *made])
    end = max(times)
    attempts = _attempts(by_rank)
    ranks = [
        _rank(rank, files, start, end, attempts, before[rank])
        for rank, files in sorted(by_rank.items())
    ]
    medians = {r.rank: statistics.median(r.step_times) for r in ranks if r.step_times}
    fastest = min(medians.values(), default=0.0)
    for r in ranks:
        if r.rank in medians and fastest > 0:
            r.straggler = medians[r.rank] / fastest
    return Account(start, end, ranks, sorted(attempts.values(), key=lambda a: a.attempt))


def _attempts(by_rank: dict[int, dict[int, RankEvents]]) -> dict[int, AttemptAccount]:
    """Each attempt's span, resume point and furthest step, over its ranks."""
    found: dict[int, AttemptAccount] = {}
    for files in by_rank.values():
        for number, f in files.items():
            first, last = f.events[0]["t"], f.events[-1]["t"]
            resumed, windows = _resumed_at(f), f.all("steps")
            reached = max((int(w["to"]) for w in windows), default=None)
            a = found.setdefault(number, AttemptAccount(number, first, last, resumed, reached))
            a.start, a.end = min(a.start, first), max(a.end, last)
            a.resumed_from = _highest(a.resumed_from, resumed)
            a.reached = _highest(a.reached, reached)
            if f.rank == 0:
                a.preemption = Preemption.of(f)
    order = sorted(found)
    for this, following in itertools.pairwise(order):
        a, resumed = found[this], found[following].resumed_from
        if a.reached is not None and resumed is not None:
            a.wasted_steps = max(0, a.reached - resumed)
    return found


def _highest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _before(first: RankEvents, pods: list[PodTimes]) -> tuple[float | None, float | None, float]:
    """When the pod of a rank's first process was made and bound, where known and
    before that process (a pod made again later is another attempt's), and how long it
    waited for its images."""
    began = first.events[0]
    host = (first.first("process_start") or {}).get("host")
    pod = pod_of(host, pods) if isinstance(host, str) and host else None
    if pod is None or pod.created is None or pod.created > began["t"]:
        return None, None, 0.0
    scheduled = pod.scheduled
    if scheduled is not None and not pod.created <= scheduled <= began["t"]:
        scheduled = None
    return pod.created, scheduled, pod.image_pull_s or 0.0


def _rank(
    rank: int,
    attempts: dict[int, RankEvents],
    start: float,
    end: float,
    jobs: dict[int, AttemptAccount],
    before: tuple[float | None, float | None, float] = (None, None, 0.0),
) -> RankAccount:
    out = RankAccount(rank)
    c = out.categories
    order = sorted(attempts)
    began = attempts[order[0]].events[0]["t"]
    created, scheduled, pulling = before
    if created is None:
        c["pending"] = began - start
    else:
        bound = scheduled if scheduled is not None else created
        c["pending"] = created - start
        c["queued"] = bound - created
        c["image_pull"] = min(pulling, began - bound)
        c["container_start"] = began - bound - c["image_pull"]
    for i, number in enumerate(order):
        f = attempts[number]
        first, last = f.events[0]["t"], f.events[-1]["t"]
        if i + 1 < len(order):
            c["recovery"] += attempts[order[i + 1]].events[0]["t"] - last
        else:
            c["idle_at_end"] = end - last
        nxt = _next_resume(jobs, number)
        spent = _attempt(f, out, nxt)
        spent["other"] = (last - first) - sum(spent.values())
        for category, seconds in spent.items():
            jobs[number].categories[category] += seconds
            if category != "other":
                c[category] += seconds
    c["other"] = (end - start) - out.total  # each attempt's, and whatever lies between
    return out


def _next_resume(jobs: dict[int, AttemptAccount], number: int) -> int | None:
    """Where the attempt after `number` resumed (None: there is none, or it never
    reached a step)."""
    later = [n for n in jobs if n > number]
    return jobs[min(later)].resumed_from if later else None


def _resumed_at(f: RankEvents) -> int | None:
    first = f.first("first_step")
    return int(first["step"]) if first and first.get("step") is not None else None


def _span(f: RankEvents, begin: str, finish: str) -> tuple[float, float] | None:
    a, b = f.first(begin), f.first(finish)
    return (a["t"], b["t"]) if a and b and b["t"] >= a["t"] else None


def _agent_ready(f: RankEvents) -> str:
    """The agent's event after which its time is waiting for the other pods: the later of
    its rendezvous' start and its imports' end, where it records one (agent_preloaded)."""
    began, preloaded = f.first("agent_rendezvous_start"), f.first("agent_preloaded")
    late = preloaded and began and preloaded["t"] > began["t"]
    return "agent_preloaded" if late else "agent_rendezvous_start"


def _attempt(f: RankEvents, out: RankAccount, next_resume: int | None) -> dict[str, float]:
    """One rank's attempt: its time from its first event to its last, by category (the
    rest is `other`); its windows' step times into `out`."""
    c = dict.fromkeys(CATEGORIES, 0.0)
    began = f.events[0]["t"]
    # The pod's agent waiting for the other pods once it has imported what its workers need
    # (forked workers record it), then the worker joining the process group.
    rendezvous = [
        _span(f, _agent_ready(f), "process_start"),
        _span(f, "rendezvous_start", "rendezvous_end"),
    ]
    restore = _span(f, "restore_start", "restore_end")
    first_step = f.first("first_step")
    windows = f.all("steps")
    c["rendezvous"] = sum(span[1] - span[0] for span in rendezvous if span)
    c["restore"] = restore[1] - restore[0] if restore else 0.0
    # An attempt that never reached a step (it failed while starting) was starting up
    # until its last event.
    reached_training = first_step["t"] if first_step else f.events[-1]["t"]
    c["startup"] = max(0.0, reached_training - began - c["rendezvous"] - c["restore"])
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
            c["finish"] = exit_event["t"] - windows[-1]["t"]
        reached = int(windows[-1]["to"])
        if next_resume is not None and reached > next_resume and steps > 0:
            wasted = min(trained, (reached - next_resume) * trained / steps)
            c["productive"] -= wasted
            c["wasted_progress"] = wasted
    return c
