"""What every backend shares in making a job's view from its objects: the nodes it asks
for, its conditions, the replicas a `replica` argument names, a watch's new events.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..controlplane.workload import Workload, WorkloadError, workload_of
from ..errors import BadInput
from .types import Condition, ConditionReached, Event, JobView, Replica, ReplicaNote


def replica_count(manifest: Mapping[str, Any], workload: Workload | None = None) -> int:
    """How many nodes a job asks for: a PyTorchJob's replicas, a TrainJob's trainer pods
    (controlplane/workload.py builds both; `workload` when the caller has it). A TrainJob of
    a runtime only its cluster has: numNodes, else 1 (what every stock runtime sets)."""
    if workload is None:
        try:
            workload = workload_of(manifest)
        except (WorkloadError, KeyError, TypeError, ValueError):
            trainer = (manifest.get("spec") or {}).get("trainer") or {}
            return int(trainer.get("numNodes") or 1)
    return workload.main.count if workload.trainjob else workload.count


def conditions_of(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    """`status.conditions` as Conditions (entries of another shape are passed over)."""
    status = obj.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason", "")),
            message=str(c.get("message", "")),
            time=c.get("lastTransitionTime"),
        )
        for c in (found if isinstance(found, list) else [])
        if isinstance(c, Mapping)
    )


def pick(replicas: Sequence[Replica], tag: str | None) -> list[Replica]:
    """The replicas a `replica` argument names (None or "all": every one)."""
    if tag in (None, "all"):
        return list(replicas)
    chosen = [r for r in replicas if r.tag == tag]
    if not chosen and replicas:
        raise BadInput(f"no replica {tag!r}; the job has {', '.join(r.tag for r in replicas)}")
    return chosen


def new_events(view: JobView, seen: set[Any]) -> Iterator[Event]:
    """The ConditionReached and ReplicaNote events of `view` not in `seen` (which
    remembers them): the part of a watch every backend shares."""
    for cond in view.conditions:
        key = ("condition", cond.type, cond.reason, cond.message)
        if cond.holds and key not in seen:
            seen.add(key)
            yield ConditionReached(cond)
    notes = [(view.name, text) for text in view.problems]
    notes += [(r.name, text) for r in view.replicas for text in r.problems]
    for who, text in notes:
        if (who, text) not in seen:
            seen.add((who, text))
            yield ReplicaNote(who, text)
