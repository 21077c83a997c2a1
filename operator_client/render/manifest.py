"""The manifest of a job: the kind its spec.operator names."""

from __future__ import annotations

from typing import Any

from ..spec.model import TrainingJob
from .pytorchjob import render_pytorchjob


def render(job: TrainingJob) -> dict[str, Any]:
    """A PyTorchJob (kubeflow.org/v1), or a TrainJob (trainer.kubeflow.org/v1alpha1) for
    spec.operator: trainjob. Pure: the same job gives the same object."""
    if job.spec.operator == "trainjob":
        from .trainjob import render_trainjob

        return render_trainjob(job)
    return render_pytorchjob(job)
