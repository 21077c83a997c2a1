"""The training-operator's rules (v1.9.4) for inputs the renderer never emits, case by case:
each expectation is what the operator's setPodEnv, defaulting and webhook do with that
PyTorchJob (docs/OPERATOR_CONTRACT.md, "Edge cases")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operator_client.controlplane.operator_env import go_atoi, operator_env
from operator_client.kubeflow.webhook import webhook_errors


def replica(replicas: Any = 1, port: int = 23456) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "trainer:1",
                        "ports": [{"name": "pytorchjob-port", "containerPort": port}],
                    }
                ]
            }
        }
    }
    if replicas != "absent":
        spec["replicas"] = replicas
    return spec


def job(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": spec,
    }


MASTER_WORKERS = {"Master": replica(1), "Worker": replica(2)}


def master_env(rank: int, world: str) -> dict[str, str]:
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "j-master-0",
        "PET_MASTER_ADDR": "j-master-0",
        "WORLD_SIZE": world,
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
    }


ENV_CASES = [
    (
        "a Master in an elastic job still gets the Master variables",
        {
            "pytorchReplicaSpecs": MASTER_WORKERS,
            "nprocPerNode": "2",
            "elasticPolicy": {"rdzvId": "x"},
        },
        "Worker",
        1,
        {
            **master_env(2, "6"),
            "PET_NPROC_PER_NODE": "2",
            "PET_RDZV_ENDPOINT": "j-worker-0:23456",
            "PET_RDZV_BACKEND": "c10d",
            "PET_NNODES": "2:2",
            "PET_RDZV_ID": "x",
        },
    ),
    (
        "the deprecated elasticPolicy.nProcPerNode is emitted when nprocPerNode is unset",
        {
            "pytorchReplicaSpecs": {"Worker": replica(2)},
            "elasticPolicy": {"nProcPerNode": 4, "minReplicas": 1},
        },
        "Worker",
        0,
        {
            "PYTHONUNBUFFERED": "1",
            "PET_RDZV_ENDPOINT": "j-worker-0:23456",
            "PET_RDZV_BACKEND": "c10d",
            "PET_NNODES": "1:1",
            "PET_NPROC_PER_NODE": "4",
        },
    ),
    (
        "Atoi takes a sign: +2 is 2 in WORLD_SIZE, and verbatim in PET_NPROC_PER_NODE",
        {"pytorchReplicaSpecs": MASTER_WORKERS, "nprocPerNode": "+2"},
        "Master",
        0,
        {**master_env(0, "6"), "PET_NPROC_PER_NODE": "+2", "PET_NNODES": "3"},
    ),
    (
        "Atoi takes a minus: -1 makes a negative WORLD_SIZE",
        {"pytorchReplicaSpecs": MASTER_WORKERS, "nprocPerNode": "-1"},
        "Master",
        0,
        {**master_env(0, "-3"), "PET_NPROC_PER_NODE": "-1", "PET_NNODES": "3"},
    ),
    (
        "an explicit null nprocPerNode is defaulted to auto",
        {"pytorchReplicaSpecs": MASTER_WORKERS, "nprocPerNode": None},
        "Worker",
        0,
        {**master_env(1, "3"), "PET_NPROC_PER_NODE": "auto", "PET_NNODES": "3"},
    ),
    (
        "what Atoi refuses counts as 1 (out of int64 range, spaces)",
        {"pytorchReplicaSpecs": MASTER_WORKERS, "nprocPerNode": "99999999999999999999"},
        "Master",
        0,
        {**master_env(0, "3"), "PET_NPROC_PER_NODE": "99999999999999999999", "PET_NNODES": "3"},
    ),
    (
        "a null replicas is defaulted to 1",
        {
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(None)},
            "nprocPerNode": "1",
        },
        "Worker",
        0,
        {**master_env(1, "2"), "PET_NPROC_PER_NODE": "1", "PET_NNODES": "2"},
    ),
    (
        "Worker: null is dropped by the API server: a Master-only job of one replica",
        {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": None}, "nprocPerNode": "1"},
        "Master",
        0,
        {**master_env(0, "1"), "PET_NPROC_PER_NODE": "1", "PET_NNODES": "1"},
    ),
    (
        "Worker-only without elasticity: the node count and the process count only",
        {"pytorchReplicaSpecs": {"Worker": replica(3)}},
        "Worker",
        2,
        {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": "auto", "PET_NNODES": "3"},
    ),
    (
        "elastic nulls are defaults: backend c10d, min from max, no restarts variable",
        {
            "pytorchReplicaSpecs": {"Worker": replica(2, port=3000)},
            "elasticPolicy": {
                "rdzvBackend": None,
                "minReplicas": None,
                "maxReplicas": 4,
                "maxRestarts": None,
            },
        },
        "Worker",
        1,
        {
            "PYTHONUNBUFFERED": "1",
            "PET_NPROC_PER_NODE": "auto",
            "PET_RDZV_ENDPOINT": "j-worker-0:3000",
            "PET_RDZV_BACKEND": "c10d",
            "PET_NNODES": "4:4",
        },
    ),
    (
        "empty rendezvous fields are set, not defaulted (Go pointers): host, port, backend",
        {
            "pytorchReplicaSpecs": {"Worker": replica(2)},
            "elasticPolicy": {"rdzvHost": "", "rdzvPort": 0, "rdzvBackend": ""},
        },
        "Worker",
        0,
        {
            "PYTHONUNBUFFERED": "1",
            "PET_NPROC_PER_NODE": "auto",
            "PET_RDZV_ENDPOINT": ":0",
            "PET_RDZV_BACKEND": "",
            "PET_NNODES": "2:2",
        },
    ),
]


@pytest.mark.parametrize(
    ("spec", "rtype", "index", "expected"),
    [c[1:] for c in ENV_CASES],
    ids=[c[0] for c in ENV_CASES],
)
def test_operator_env(
    spec: dict[str, Any], rtype: str, index: int, expected: dict[str, str]
) -> None:
    env = operator_env(job(spec), rtype, index)
    assert env == expected
    assert list(env) == list(expected)  # the operator's order: a later duplicate would win


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", 2), ("+2", 2), ("-1", -1), ("007", 7), (" 2", None), ("2.0", None), ("auto", None),
     ("", None), ("9223372036854775807", 2**63 - 1), ("9223372036854775808", None)],
)  # fmt: skip
def test_go_atoi(text: str, value: int | None) -> None:
    assert go_atoi(text) == value


def broken(change: str) -> dict[str, Any]:
    manifest = job({"pytorchReplicaSpecs": copy.deepcopy(MASTER_WORKERS), "nprocPerNode": "1"})
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    if change == "worker-0":
        replicas["Worker"]["replicas"] = 0
    elif change == "worker-minus":
        replicas["Worker"]["replicas"] = -1
    elif change == "worker-null":
        replicas["Worker"] = None
    elif change == "empty":
        manifest["spec"]["pytorchReplicaSpecs"] = {}
    elif change == "specs-null":
        manifest["spec"]["pytorchReplicaSpecs"] = None
    elif change == "specs-absent":
        del manifest["spec"]["pytorchReplicaSpecs"]
    elif change == "master-absent-replicas":
        del replicas["Master"]["replicas"]
    elif change == "worker-absent-replicas":
        del replicas["Worker"]["replicas"]
    elif change == "elastic-worker-null":
        del replicas["Master"]
        replicas["Worker"] = None
        manifest["spec"]["elasticPolicy"] = {}
    elif change == "empty-rdzv-conf":
        del replicas["Master"]
        manifest["spec"]["elasticPolicy"] = {"rdzvConf": []}
    elif change == "no-containers":
        replicas["Worker"]["template"]["spec"]["containers"] = []
    return manifest


WEBHOOK_CASES = [
    ("worker-0", ["spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1"]),
    ("worker-minus", ["spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1"]),
    # The API server drops the null (training-operator v1.9.4 never sees it): Master-only.
    ("worker-null", []),
    ("empty", []),  # an empty map is not nil: the operator accepts it (and creates nothing)
    ("specs-null", ["spec.pytorchReplicaSpecs: Required value: must be required"]),
    ("specs-absent", ["spec.pytorchReplicaSpecs: Required value: must be required"]),
    ("master-absent-replicas", ["spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"]),
    ("worker-absent-replicas", []),  # defaulted to 1 later
    (
        "elastic-worker-null",
        [
            "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic "
            "policy is used"
        ],
    ),
    (
        "empty-rdzv-conf",
        [
            "spec.elasticPolicy.rdzvConf is an empty list, which crashes the "
            "training-operator's reconcile loop (v1.9.4); leave it out instead"
        ],
    ),
    (
        "no-containers",
        [
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must "
            "be specified",
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must "
            "have at least one container with name pytorch",
        ],
    ),
]


@pytest.mark.parametrize(("change", "expected"), WEBHOOK_CASES, ids=[c[0] for c in WEBHOOK_CASES])
def test_webhook(change: str, expected: list[str]) -> None:
    assert webhook_errors(broken(change)) == expected
