"""The upstream oracle, run in .venv-oracle (make test installs it): every object given on
standard input (a JSON list) goes through the official generated models and back, and every
field lost, added or changed on the way is printed, one JSON list per object.

- PyTorchJob: kubeflow-training 1.9.4's KubeflowOrgV1PyTorchJob (the Kubernetes client's
  V1PodTemplateSpec for each replica's pod template).
- TrainJob, ClusterTrainingRuntime: kubeflow-trainer-api 2.3.0's pydantic models; each
  runtime's replicated Job pod templates also through the Kubernetes client's
  V1PodTemplateSpec.

    .venv-oracle/bin/python tests/official_models.py < objects.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


class _Response:
    """What the generated ApiClient deserializes: a body as text."""

    def __init__(self, body: Any) -> None:
        self.data = json.dumps(body)


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Every way `after` differs from `before`, one line each."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after)):
            at = f"{path}.{key}"
            if key not in after:
                out.append(f"lost {at}")
            elif key not in before:
                out.append(f"added {at}: {after[key]!r}")
            else:
                out += differences(before[key], after[key], at)
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            d
            for i, (b, a) in enumerate(zip(before, after, strict=True))
            for d in differences(b, a, f"{path}[{i}]")
        ]
    return [] if before == after else [f"changed {path}: {before!r} -> {after!r}"]


def _kubernetes(body: Any, klass: str) -> Any:
    from kubernetes.client import ApiClient

    api = ApiClient()
    return api.sanitize_for_serialization(api.deserialize(_Response(body), klass))


def round_trip(obj: dict[str, Any]) -> list[str]:
    """The differences the official models make to `obj`."""
    kind = obj.get("kind")
    if kind == "PyTorchJob":
        from kubeflow.training import ApiClient

        api = ApiClient()
        back = api.sanitize_for_serialization(
            api.deserialize(_Response(obj), "KubeflowOrgV1PyTorchJob")
        )
        return differences(obj, back)
    from kubeflow_trainer_api import models

    model = {
        "TrainJob": models.TrainerV1alpha1TrainJob,
        "ClusterTrainingRuntime": models.TrainerV1alpha1ClusterTrainingRuntime,
        "TrainingRuntime": models.TrainerV1alpha1TrainingRuntime,
    }.get(str(kind))
    if model is None:
        return [f"no official model for kind {kind!r}"]
    found = differences(obj, model.from_dict(obj).to_dict())
    if kind != "TrainJob":
        for i, job in enumerate(obj["spec"]["template"]["spec"]["replicatedJobs"]):
            template = job["template"]["spec"]["template"]
            found += [
                f"replicatedJobs[{i}] pod template: {d}"
                for d in differences(template, _kubernetes(template, "V1PodTemplateSpec"))
            ]
    return found


if __name__ == "__main__":
    print(json.dumps([round_trip(o) for o in json.load(sys.stdin)]))
