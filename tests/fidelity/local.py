"""What the local backend makes of a corpus input, in the goldens' form (record.py)."""

from __future__ import annotations

from typing import Any

from operator_client.controlplane.pod_plan import plan_of
from operator_client.controlplane.workload import WorkloadError
from operator_client.kubeflow.webhook import admission_errors

from ..test_trainer_runtimes import TORCH, runtime
from .corpus import documents
from .project import project

LEVEL = "baseline"  # kctl-fidelity's, and a local run's default


def local(name: str) -> dict[str, Any]:
    job, *runtimes = documents(name)
    problems = admission_errors(job)
    if problems:
        return {"refused": "; ".join(problems)}
    given = {r["metadata"]["name"]: r for r in runtimes}
    if job["kind"] == "TrainJob" and job["spec"]["runtimeRef"]["name"] == "torch-distributed":
        given.setdefault("torch-distributed", runtime(TORCH))  # installed on the cluster
    try:
        plan = plan_of(job, given, level=LEVEL)  # the local backend's one plan of the pods
    except WorkloadError as exc:
        return {"refused": str(exc)}
    refused = plan.refused
    # The plan's Pod objects are in its pods' order: each pod's replica type is beside it.
    pods = [
        project(pod)
        for pod, planned in zip(plan.objects, plan.pods, strict=True)
        if planned.type not in refused
    ]
    if not pods and refused:
        return {"pods": [], "refused_pods": sorted(refused.values())}
    return {"pods": sorted(pods, key=lambda p: p["name"])}
