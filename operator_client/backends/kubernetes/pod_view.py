"""What a job object and its pods say, read for the view (pure): whether the job finished,
is being deleted or was changed by an apply, what holds a deletion, a pod as a Replica,
how long its image pull took, the times the kubelet and scheduler wrote."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from ...controlplane import lifecycle as lc
from ...kubeflow.kinds import Kind, kind_of
from ..types import Replica
from .pod_reasons import pod_phase, pod_problems, restarts

Pods = list[dict[str, Any]]


def finished(obj: Mapping[str, Any]) -> bool:
    return lc.state_of(obj) in lc.FINISHED


def terminating(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def apply_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether an apply changed what the job asks for (its spec, labels, annotations).
    Not the resourceVersion alone: the operator's status writes bump it too, and one that
    lands between reading the job and applying it would turn an unchanged apply into a
    "configured" one."""

    def asked(obj: Mapping[str, Any]) -> tuple[Any, ...]:
        meta = obj.get("metadata", {})
        return obj.get("spec"), meta.get("labels"), meta.get("annotations")

    return asked(before) != asked(after)


def job_state_words(obj: Mapping[str, Any] | None) -> str:
    """The job as an apply finds it, in words."""
    if obj is None:
        return "no such job"
    kind, name = kind_of(obj), obj["metadata"]["name"]
    if terminating(obj):
        since = obj["metadata"]["deletionTimestamp"]
        return f"{kind.short}/{name} is terminating (deleted at {since})"
    return f"{kind.short}/{name} is {lc.state_of(obj)}"


def holding(obj: Mapping[str, Any] | None, pods: Pods) -> str:
    """What keeps a terminating job: its finalizers (or that the job itself is gone) and
    the pods still there."""
    names = ", ".join(p["metadata"]["name"] for p in pods) or "none"
    if obj is None:
        return f"the job is gone; pods left: {names}"
    finalizers = ", ".join(obj.get("metadata", {}).get("finalizers") or []) or "none"
    return f"finalizers: {finalizers}; pods left: {names}"


def grace_of(obj: Mapping[str, Any]) -> int:
    """The longest termination grace period of the job's pods (30 s, Kubernetes' default,
    where the object does not say: a TrainJob's pods are its runtime's)."""
    try:
        return lc.Policy.from_manifest(obj).grace_seconds
    except (ValueError, KeyError, TypeError):
        return 30


def replica_of(
    kind: Kind, job_name: str, pod: Mapping[str, Any], warnings: Sequence[str] = ()
) -> Replica:
    name = pod["metadata"]["name"]
    return Replica(
        name=name,
        tag=kind.tag(job_name, name),
        phase=pod_phase(pod),
        restarts=restarts(pod),
        exit_code=_exit_code(pod, kind.container),
        problems=(*pod_problems(pod), *warnings),
        node=pod.get("spec", {}).get("nodeName") or "-",
        created=epoch(pod["metadata"].get("creationTimestamp")),
        scheduled=epoch(_condition_time(pod, "PodScheduled")),
        started=_first_start(pod, kind.container),
    )


# The kubelet's words (pkg/kubelet/images/image_manager.go): the second duration is what
# the pod waited, a pull serialized behind others included.
_PULLED = re.compile(r"Successfully pulled image .* in \S+ \((?P<waited>\S+) including waiting\)")
_GO_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration as Go prints one (`1m2.5s`, `512ms`), or None."""
    parts = list(_GO_DURATION.finditer(text))
    if not parts or "".join(p.group(0) for p in parts) != text:
        return None
    return sum(float(p["n"]) * _UNIT_SECONDS[p["unit"]] for p in parts)


def image_pull_seconds(
    events: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, float]:
    """Seconds each pod waited for its images, from the kubelet's Pulled events of that
    very pod (its uid: a pod of the same name before it keeps its events); an image that
    was already present costs nothing."""
    uids = {p["metadata"].get("uid"): p["metadata"]["name"] for p in pods}
    waited: dict[str, float] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        pod = uids.get(involved.get("uid"))
        if pod is None or involved.get("kind") != "Pod" or event.get("reason") != "Pulled":
            continue
        found = _PULLED.search(str(event.get("message", "")))
        seconds = go_duration(found["waited"]) if found else 0.0
        waited[pod] = waited.get(pod, 0.0) + (seconds or 0.0)
    return waited


def _condition_time(pod: Mapping[str, Any], kind: str) -> str | None:
    """When the pod's condition of this type last became True."""
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            found = cond.get("lastTransitionTime")
            return found if isinstance(found, str) else None
    return None


def _first_start(pod: Mapping[str, Any], container: str) -> float | None:
    """When the trainer container first started: its current start while it has not
    restarted (after a restart the kubelet keeps only the newest)."""
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        if cs.get("name") != container or cs.get("restartCount"):
            continue
        for state in (cs.get("state") or {}).values():
            if isinstance(state, dict) and isinstance(state.get("startedAt"), str):
                return epoch(state["startedAt"])
    return None


def _exit_code(pod: Mapping[str, Any], container: str) -> int | None:
    """The trainer container's exit code, when it has ended (or ended before a restart)."""
    for cs in pod.get("status", {}).get("containerStatuses", []):
        if cs.get("name") != container:
            continue
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            code = (state.get("terminated") or {}).get("exitCode")
            if code is not None:
                return int(code)
    return None


def epoch(timestamp: str | None) -> float | None:
    """Seconds since the epoch from an RFC 3339 time as the API writes it."""
    if not timestamp:
        return None
    parsed = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")
    return parsed.replace(tzinfo=timezone.utc).timestamp()
