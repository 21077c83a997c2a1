"""Backends: where a rendered job runs. `backend_for` is the one place that picks one;
everything else talks to the `Backend` contract (base.py)."""

from __future__ import annotations

from pathlib import Path

from .base import Backend

BACKENDS = ("local", "kubernetes")


def backend_for(
    name: str = "kubernetes",
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    home: Path | None = None,
) -> Backend:
    """The backend called `name`: "local" (processes on this machine, state under `home`)
    or "kubernetes" (the cluster of the kubeconfig and context, connected on first use).
    Each is imported only when chosen."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(home)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(kubeconfig, context)
    from ..errors import BadInput

    raise BadInput(f"backend {name!r}: use one of {', '.join(BACKENDS)}")
