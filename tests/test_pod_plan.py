"""The one plan of a job's pods (controlplane/pod_plan.py): what it holds, that the local
backend builds it once for a check and its submit, and the operator's env as processes on
one machine make it (local_env.on_one_machine), case by case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operator_client import Client
from operator_client.backends.local import LocalBackend
from operator_client.backends.local import backend as local_backend
from operator_client.backends.local.local_env import on_one_machine
from operator_client.controlplane.pod_plan import plan_of
from operator_client.render import render
from operator_client.spec import load_job_text

from .conftest import ROOT, job_yaml


def manifest(extra: str, name: str = "job") -> dict[str, Any]:
    return render(load_job_text(job_yaml(name, f"  command: [python, train.py]\n{extra}")).job)


def test_the_plan_holds_every_pod_in_start_order_with_its_operator_env() -> None:
    job = manifest("  nodes: 3\n")
    plan = plan_of(job)
    assert [(p.name, p.type, p.index) for p in plan.pods] == [
        ("job-master-0", "Master", 0),
        ("job-worker-0", "Worker", 0),
        ("job-worker-1", "Worker", 1),
    ]
    assert [p.operator_env["RANK"] for p in plan.pods] == ["0", "1", "2"]
    assert plan.hosts == {"job-master-0", "job-worker-0", "job-worker-1"}
    assert [o["metadata"]["name"] for o in plan.objects] == [p.name for p in plan.pods]
    assert plan.pods[1].fields["metadata.name"] == "job-worker-0"
    assert (plan.refused, plan.kubelet_refused) == ({}, {})


def test_the_plan_says_which_groups_admission_and_the_kubelet_refuse() -> None:
    job = manifest("  nodes: 2\n")
    for rtype in ("Master", "Worker"):
        spec = job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
        spec["securityContext"].pop("runAsUser")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    plan = plan_of(job, level="baseline", default_uid=0)
    assert list(plan.refused) == ["Worker"] and "host namespaces" in plan.refused["Worker"]
    assert "image will run as root" in plan.kubelet_refused["Master"]


def test_a_check_and_its_submit_build_one_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client.apply checks, then submits: the backend plans the job's pods once, and the
    dry run's Pods are the plan's."""
    built = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(plan_of(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(local_backend, "plan_of", counted)
    client = Client(backend=LocalBackend(tmp_path, pods="process"))
    handle = client.apply(ROOT / "examples" / "quickstart.yaml", dry_run="server")
    assert len(built) == 1
    assert handle.submitted is not None and handle.submitted.pods == list(built[0].objects)
    client.apply(ROOT / "examples" / "quickstart.yaml", dry_run="server")
    assert len(built) == 2  # a new apply checks afresh
    client.preflight(ROOT / "examples" / "quickstart.yaml")
    client.preflight(ROOT / "examples" / "quickstart.yaml")
    assert len(built) == 4  # so does every check, the same job or not


PJ = {
    "PYTHONUNBUFFERED": "1",
    "MASTER_ADDR": "j-master-0",
    "PET_MASTER_ADDR": "j-master-0",
    "MASTER_PORT": "23456",
    "PET_MASTER_PORT": "23456",
    "RANK": "1",
}
LOCAL_PJ = {
    **PJ,
    "MASTER_ADDR": "127.0.0.1",
    "PET_MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "40123",
    "PET_MASTER_PORT": "40123",
}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (PJ, LOCAL_PJ),
        ({"PET_MASTER_ADDR": "j-node-0-0.j", "PET_MASTER_PORT": "29400"},
         {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "40123"}),
        ({"PET_RDZV_ENDPOINT": "j-worker-0:29400"}, {"PET_RDZV_ENDPOINT": "127.0.0.1:40123"}),
        # A rendezvous host of the user's own stays; the port is this machine's.
        ({"PET_RDZV_ENDPOINT": "etcd.example.com:2379"},
         {"PET_RDZV_ENDPOINT": "etcd.example.com:40123"}),
        ({"PET_RDZV_ENDPOINT": ":0"}, {"PET_RDZV_ENDPOINT": ":40123"}),  # an empty rdzvHost
        ({"MASTER_ADDR": "other-master-0"}, {"MASTER_ADDR": "other-master-0"}),
        ({"JOB_COMPLETION_INDEX": "2"}, {"JOB_COMPLETION_INDEX": "2"}),
    ],
)  # fmt: skip
def test_the_operators_env_on_one_machine(env: dict[str, str], expected: dict[str, str]) -> None:
    hosts = frozenset({"j-master-0", "j-worker-0", "j-node-0-0", "j-node-0-0.j"})
    assert on_one_machine(env, hosts, 40123) == expected


def test_a_job_over_max_pods_is_planned_by_its_count_alone() -> None:
    """2**31 - 1 nodes: the plan says how many pods there are and makes none of them."""
    plan = plan_of(manifest("  nodes: 2147483647\n"), max_pods=64)
    assert plan.count == 2147483647 and plan.pods == () and plan.objects == ()
    assert plan_of(manifest("  nodes: 3\n"), max_pods=3).count == len(
        plan_of(manifest("  nodes: 3\n")).pods
    )
