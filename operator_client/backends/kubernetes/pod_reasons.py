"""Why a replica pod is not running, in one line each: the reasons users otherwise dig
out of `kubectl describe`. Pure functions of a pod (as the API returns it, a dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...kubeflow import pytorchjob as pj

# Waiting reasons worth a line (ContainerCreating and PodInitializing are just progress).
_WAITING = {
    "ImagePullBackOff": "cannot pull image {image}",
    "ErrImagePull": "cannot pull image {image}",
    "InvalidImageName": "invalid image name {image}",
    "CrashLoopBackOff": "crashing repeatedly (restarts back off)",
    "CreateContainerConfigError": "bad container config (a missing Secret or ConfigMap key?)",
    "CreateContainerError": "the container cannot be created",
}


def pod_phase(pod: Mapping[str, Any]) -> str:
    """Phase, or the deleting state kubectl shows."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    return str(pod.get("status", {}).get("phase", "Pending"))


def restarts(pod: Mapping[str, Any]) -> int:
    """Container restarts of the pod (the trainer container and its init containers)."""
    status = pod.get("status", {})
    return sum(
        int(c.get("restartCount", 0))
        for c in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    )


def _state_lines(statuses: list[dict[str, Any]], init: bool, pod_name: str) -> list[str]:
    lines = []
    for cs in statuses:
        name = cs.get("name", "?")
        state = cs.get("state", {}) or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or {}
        reason = waiting.get("reason")
        if init and name == pj.INIT_CONTAINER_NAME and ("running" in state or reason):
            master = pod_name.rsplit("-worker-", 1)[0] + "-master-0"
            lines.append(
                f"init container {name} waits until {master} resolves (is the Master running?)"
            )
            continue
        if reason in _WAITING:
            text = _WAITING[reason].format(image=cs.get("image", "?"))
            message = waiting.get("message")
            lines.append(f"{name}: {reason}: {text}" + (f" ({message})" if message else ""))
        for term, when in ((terminated, ""), (last, "last run ")):
            if not term:
                continue
            code = term.get("exitCode")
            if term.get("reason") == "OOMKilled":
                lines.append(f"{name}: {when}OOMKilled (exit code {code}): raise resources.memory")
            elif code not in (None, 0):
                lines.append(f"{name}: {when}exited with code {code} ({term.get('reason', '')})")
    return lines


def pod_problems(pod: Mapping[str, Any]) -> list[str]:
    """One line per reason the pod is stuck or failed; [] for a healthy pod."""
    status = pod.get("status", {})
    name = pod.get("metadata", {}).get("name", "?")
    lines = []
    if status.get("reason") == "Evicted":
        lines.append(f"evicted: {status.get('message', 'node pressure')}")
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            lines.append(
                f"{cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}".strip()
            )
    lines += _state_lines(list(status.get("initContainerStatuses", [])), True, name)
    lines += _state_lines(list(status.get("containerStatuses", [])), False, name)
    return lines
