"""What the local backend makes of a corpus input, in the goldens' form (record.py)."""

from __future__ import annotations

from typing import Any

from operator_client.controlplane import pod_security as pss
from operator_client.controlplane.pod_manifests import pod_manifests
from operator_client.controlplane.workload import WorkloadError, workload_of
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
        workload = workload_of(job, given)
    except WorkloadError as exc:
        return {"refused": str(exc)}
    refused = pss.group_refusals(workload, LEVEL)
    # pod_manifests keeps workload.pods()'s order: each pod's replica type is beside it.
    pods = [
        project(pod)
        for pod, (_, replica_type, _) in zip(pod_manifests(workload), workload.pods(), strict=True)
        if replica_type not in refused
    ]
    if not pods and refused:
        return {"pods": [], "refused_pods": sorted(refused.values())}
    return {"pods": sorted(pods, key=lambda p: p["name"])}
