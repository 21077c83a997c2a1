"""Security contexts that pass Pod Security "restricted" by default, and where a pod's
containers and security contexts are in its spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The trainer image (images/) creates this user. Above 10000, so it never collides with a
# host account (checkov CKV_K8S_40).
RUN_AS_USER = 10001
RUN_AS_GROUP = 10001


def pod_security_context() -> dict[str, Any]:
    """Non-root, fixed uid/gid, RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "fsGroup": RUN_AS_GROUP,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(add_capabilities: tuple[str, ...] = ()) -> dict[str, Any]:
    """No privilege escalation, all capabilities dropped (a network profile may add some),
    read-only root filesystem (writable /tmp and /dev/shm come from emptyDirs)."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if add_capabilities:
        capabilities["add"] = list(add_capabilities)
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": capabilities,
    }


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A pod spec's init, regular and ephemeral containers, in that order (the order of
    Kubernetes' pod visitor, visitor.go)."""
    return [
        c
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    ]


def security_context(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """The securityContext of a pod spec or a container ({} when none)."""
    return item.get("securityContext") or {}
