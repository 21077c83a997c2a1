"""Backends: where a rendered job runs. `backend_for` is the one place that picks one;
everything else talks to the `Backend` contract (base.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput
from .base import Backend

if TYPE_CHECKING:
    from ..kubeflow.pod_objects import PodObjects

BACKENDS = ("local", "kubernetes")


def backend_for(
    name: str = "kubernetes",
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    home: Path | None = None,
    runtimes: Mapping[str, Mapping[str, Any]] | None = None,
    objects: PodObjects | None = None,
    pod_security: str | None = None,
) -> Backend:
    """The backend called `name`: "local" (processes on this machine, state under `home`,
    TrainJobs against `runtimes` beside the built-in one, pods reading `objects`; with a
    kubeconfig or context, what neither gives is read from that cluster) or "kubernetes"
    (the cluster of the kubeconfig and context, connected on first use; it has its own
    runtimes, Secrets and ConfigMaps). `pod_security`: the level local pods are admitted
    at (baseline or restricted). Each is imported only when chosen."""
    if name == "local":
        from .local import LocalBackend

        lookup = None
        if kubeconfig or context:
            from .kubernetes import KubernetesBackend

            lookup = KubernetesBackend(kubeconfig, context).lookup
        return LocalBackend(
            home, runtimes=runtimes, objects=objects, lookup=lookup, pod_security=pod_security
        )
    if runtimes or objects or pod_security:
        raise BadInput(
            "--runtime, --secret, --configmap and --pod-security are for --local: a cluster "
            "has its own (and its namespace's pod-security.kubernetes.io/enforce label)"
        )
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(kubeconfig, context)
    raise BadInput(f"backend {name!r}: use one of {', '.join(BACKENDS)}")
