"""Which checkpoint an attempt starts from: `checkpoint.resume` chooses where a run's line
begins (the newest, the best, a step, a URI, or fresh); every later attempt of that spec
(a restart, a preemption, the same file applied again) continues the line from its newest
committed checkpoint, so a restart never loses or repeats work.

A choice other than `auto` is recorded when honoured (resume.json: the spec's hash, the
choice, the attempt that began the line, the checkpoint it began from), and honoured again
only by another spec. The line is the checkpoints its attempts committed (checkpoints
are ordered by attempt, then step: checkpoints.committed); until it has one, it continues
from where it began. `plan` is the rule; `read` and `write` are the record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..spec.document import spec_hash
from ..spec.urls import CHECKPOINT_URI_SCHEMES
from ..storage import ObjectStore
from .checkpoints import Best, Manifest, committed
from .documents import Document

if TYPE_CHECKING:
    from ..spec.model import TrainingJob

KEY = "resume.json"
AUTO, NEVER, BEST = "auto", "never", "best"


class ResumeChoiceError(ValueError):
    """The checkpoint `checkpoint.resume` names is not there to start from."""


@dataclass(frozen=True)
class Line:
    """Where the run's current line began."""

    spec_hash: str  # of the spec whose choice began it
    choice: str  # checkpoint.resume as written: never, best, a step, a URI
    attempt: int  # the attempt that began it
    step: int | None  # the checkpoint it began from (None: fresh)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Line:
        doc = Document.parse(data, "resume line")
        return cls(
            spec_hash=doc.text("spec_hash"),
            choice=doc.text("choice"),
            attempt=doc.count("attempt"),
            step=doc.count("step") if doc.has("step") and doc.raw["step"] is not None else None,
        )


@dataclass(frozen=True)
class Plan:
    """What an attempt starts from: the first of `candidates` (the run's own store) whose
    files verify, else the checkpoint `from_uri` names, else a fresh start, unless
    `required` (then the attempt fails: a fresh start is not what was asked). `begins`:
    the choice whose line this attempt begins (recorded once it started), None when it
    continues one."""

    candidates: tuple[Manifest, ...]
    from_uri: str | None = None
    begins: str | None = None  # the choice that begins a line
    required: bool = False

    def line(self, spec_hash: str, attempt: int, started: Manifest | None) -> Line | None:
        """The record of the line this attempt begins (None: it continues one)."""
        if self.begins is None:
            return None
        return Line(spec_hash, self.begins, attempt, started.step if started else None)


def choice_text(resume: int | str) -> str:
    """checkpoint.resume as the record keeps it."""
    return str(resume)


def plan(
    resume: int | str,
    spec_hash: str,
    line: Line | None,
    committed: list[Manifest],
    best: Best | None,
) -> Plan:
    """The start of an attempt of a run whose committed checkpoints are `committed`
    (newest first), by the spec's `resume` and the run's recorded `line`."""
    choice = choice_text(resume)
    if choice == AUTO or (
        line is not None and (line.spec_hash, line.choice) == (spec_hash, choice)
    ):
        return _continue(line, committed)
    if choice == NEVER:
        return Plan((), begins=choice)
    if choice == BEST:
        if best is None:
            raise ResumeChoiceError("resume: best needs checkpoint.monitor")
        ranked = best.ranked(committed)
        if committed and not ranked:
            raise ResumeChoiceError(
                f"no committed checkpoint recorded {best.monitor} (the newest is step "
                f"{committed[0].step}): give resume: auto, or a step"
            )
        return Plan(tuple(ranked), begins=choice, required=bool(ranked))
    if isinstance(resume, int):
        at = tuple(m for m in committed if m.step == resume)
        if not at:
            steps = ", ".join(str(m.step) for m in committed[:10]) or "none"
            raise ResumeChoiceError(
                f"no committed checkpoint at step {resume} (committed, newest first: {steps})"
            )
        return Plan(at, begins=choice, required=True)
    return Plan((), from_uri=choice, begins=choice, required=True)


def plan_for(job: TrainingJob, store: ObjectStore) -> Plan:
    """plan() for this job's spec, from the run's record and committed checkpoints."""
    policy = job.spec.checkpoint
    best = Best.of(policy)
    return plan(policy.resume, spec_hash(job), read(store), committed(store), best)


def _continue(line: Line | None, committed: list[Manifest]) -> Plan:
    """The newest of the line; where it began while it has none (or none that verify)."""
    if line is None:
        return Plan(tuple(committed))
    own = tuple(m for m in committed if m.attempt >= line.attempt)
    if line.step is None:
        return Plan(own)
    if line.choice.startswith(CHECKPOINT_URI_SCHEMES):
        return Plan(own, from_uri=line.choice, required=True)
    began = tuple(m for m in committed if m.step == line.step and m.attempt < line.attempt)
    return Plan(own + began, required=True)


def read(store: ObjectStore) -> Line | None:
    """The recorded line (None: none recorded, or a record of another shape, which is
    then ignored: the run continues from its newest checkpoint). StoreError when the
    store cannot say: starting elsewhere than the line would lose or repeat work."""
    if not store.exists(KEY):
        return None
    try:
        return Line.from_json(store.get_bytes(KEY))
    except ValueError:
        return None


def write(store: ObjectStore, line: Line) -> None:
    store.put_bytes(KEY, line.to_json())
