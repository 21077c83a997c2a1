"""The manifest of a job: the kind its spec.operator names."""

from __future__ import annotations

from typing import Any

from ..errors import RenderBug
from ..kubeflow.webhook import admission_errors
from ..spec.model import TrainingJob
from .pytorchjob import render_pytorchjob


def render(job: TrainingJob) -> dict[str, Any]:
    """A PyTorchJob (kubeflow.org/v1), or a TrainJob (trainer.kubeflow.org/v1alpha1) for
    spec.operator: trainjob. Pure: the same job gives the same object."""
    if job.spec.operator == "trainjob":
        from .trainjob import render_trainjob

        return render_trainjob(job)
    return render_pytorchjob(job)


def render_admitted(job: TrainingJob, source: str = "") -> dict[str, Any]:
    """render(job), checked against the operator's admission rules (kubeflow/webhook.py):
    RenderBug, naming `source` (the job file), where they refuse it."""
    manifest = render(job)
    problems = admission_errors(manifest)
    if problems:
        where = f"{source}: " if source else ""
        raise RenderBug(
            f"{where}internal error, the operator would reject the rendered job: "
            f"{'; '.join(problems)} (a kctl-train bug: please report it with the job file)"
        )
    return manifest
