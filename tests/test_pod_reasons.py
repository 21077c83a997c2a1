"""Why pods are stuck, one table row per reason (backends/kubernetes/pod_reasons.py), and the node
checks of the preflight (backends/kubernetes/preflight.py: node_findings)."""

from __future__ import annotations

from typing import Any

import pytest

from operator_client.backends.kubernetes.pod_reasons import pod_phase, pod_problems, restarts
from operator_client.backends.kubernetes.preflight import node_findings
from operator_client.render import render
from operator_client.spec import load_job

from .conftest import ROOT


def pod(name: str = "j-worker-0", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def container(state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "pytorch", "image": "img:1", "state": state, **extra}


CASES = [
    (pod(phase="Running", containerStatuses=[container({"running": {}})]), []),
    (
        pod(
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes: taint",
                }
            ]
        ),
        ["Unschedulable: 0/4 nodes: taint"],
    ),
    (
        pod(
            containerStatuses=[
                container({"waiting": {"reason": "ImagePullBackOff", "message": "401"}})
            ]
        ),
        ["pytorch: ImagePullBackOff: cannot pull image img:1 (401)"],
    ),
    (
        pod(containerStatuses=[container({"waiting": {"reason": "CreateContainerConfigError"}})]),
        [
            "pytorch: CreateContainerConfigError: "
            "bad container config (a missing Secret or ConfigMap key?)"
        ],
    ),
    (
        pod(
            containerStatuses=[container({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})]
        ),
        ["pytorch: OOMKilled (exit code 137): raise resources.memory"],
    ),
    (
        pod(
            containerStatuses=[
                container(
                    {"waiting": {"reason": "CrashLoopBackOff"}},
                    lastState={"terminated": {"exitCode": 1, "reason": "Error"}},
                )
            ]
        ),
        [
            "pytorch: CrashLoopBackOff: crashing repeatedly (restarts back off)",
            "pytorch: last run exited with code 1 (Error)",
        ],
    ),
    (pod(phase="Failed", reason="Evicted", message="low on memory"), ["evicted: low on memory"]),
    (
        pod(
            "j-worker-2", initContainerStatuses=[{"name": "init-pytorch", "state": {"running": {}}}]
        ),
        ["init container init-pytorch waits until j-master-0 resolves (is the Master running?)"],
    ),
]


@pytest.mark.parametrize(("pod_", "expected"), CASES)
def test_pod_problems(pod_: dict[str, Any], expected: list[str]) -> None:
    assert pod_problems(pod_) == expected


def test_phase_and_restarts() -> None:
    deleting = {"metadata": {"name": "p", "deletionTimestamp": "x"}, "status": {"phase": "Running"}}
    assert pod_phase(deleting) == "Terminating"
    assert pod_phase(pod()) == "Pending"
    two = pod(
        containerStatuses=[container({}, restartCount=2)],
        initContainerStatuses=[{"restartCount": 1}],
    )
    assert restarts(two) == 3


def node(labels: dict[str, str], gpus: str = "8") -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": gpus}}}


GKE = {
    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    "cloud.google.com/gke-nodepool": "a3-highgpu",
}


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([node(GKE)], []),
        ([node({})], ["no node matches the node pool"]),
        ([node(GKE, gpus="4")], ["has 8 allocatable nvidia.com/gpu"]),
        ([], ["no node matches"]),
    ],
)
def test_node_findings(nodes: list[dict[str, Any]], expected: list[str]) -> None:
    manifest = render(load_job(ROOT / "examples/gke-h100-4x8.yaml").job)
    findings = node_findings(manifest, nodes)
    assert len(findings) == len(expected)
    for finding, text in zip(findings, expected, strict=True):
        assert finding.level == "warning" and text in finding.message
