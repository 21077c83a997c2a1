"""Trainer v2 objects as a user writes them by hand: a ClusterTrainingRuntime whose one
replicated Job `node` runs the pod spec given, and a TrainJob on it (the shapes Kubeflow's
runtimes have; tests/test_trainer_runtimes.py uses Kubeflow's own files)."""

from __future__ import annotations

from typing import Any

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def runtime(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """A ClusterTrainingRuntime of one node whose trainer pod is `pod`."""
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {ANCESTOR: "trainer"}},
            "spec": {"template": {"spec": pod}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [node]}}},
    }


def trainjob(
    name: str, runtime_name: str, command: list[str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A TrainJob on `runtime_name` whose trainer runs `command`."""
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {"runtimeRef": {"name": runtime_name}, "trainer": {"command": command}},
    }
