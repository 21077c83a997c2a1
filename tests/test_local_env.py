"""The local backend's replica environment against docs/OPERATOR_CONTRACT.md, case by case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operator_client.backends.local.local_env import (
    loopback_for,
    replica_command,
    replica_env,
)
from operator_client.backends.local.supervisor import RESTART_BACKOFF_ENV, restart_delays
from operator_client.controlplane.lifecycle import replicas_of
from operator_client.controlplane.pod_env import PodEnvError
from operator_client.controlplane.pod_plan import plan_of
from operator_client.render import render
from operator_client.spec import load_job_text

from .conftest import first_pod, job_yaml

PORT = 40123
# Every variable the operator may add; a case lists those it must add, the rest must be absent.
OPERATOR_VARS = {
    "PYTHONUNBUFFERED",
    "MASTER_ADDR",
    "PET_MASTER_ADDR",
    "MASTER_PORT",
    "PET_MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_NODE_RANK",
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_BACKEND",
    "PET_MAX_RESTARTS",
    "PET_RDZV_ID",
    "PET_RDZV_CONF",
    "PET_STANDALONE",
}
RDZV_CONF = "join_timeout=600,keep_alive_interval=1,keep_alive_max_attempt=3"


def manifest(extra: str, name: str = "job") -> dict[str, Any]:
    text = job_yaml(name, f"  command: [python, train.py]\n{extra}")
    return render(load_job_text(text).job)


def fixed(rank: int) -> dict[str, str]:
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(PORT),
        "PET_MASTER_PORT": str(PORT),
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "2",
        "WORLD_SIZE": "6",  # nodes x nproc: a node-level count, as the operator computes it
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
    }


ELASTIC = {
    "PYTHONUNBUFFERED": "1",
    "PET_RDZV_ENDPOINT": f"127.0.0.1:{PORT}",
    "PET_RDZV_BACKEND": "c10d",
    "PET_NNODES": "1:3",
    "PET_NPROC_PER_NODE": "1",
    "PET_MAX_RESTARTS": "3",
    "PET_RDZV_ID": "job",
    "PET_RDZV_CONF": RDZV_CONF,
}

CASES = [
    ("nodes: 3\n  processesPerNode: 2", "Master", 0, fixed(0)),
    ("nodes: 3\n  processesPerNode: 2", "Worker", 0, fixed(1)),
    ("nodes: 3\n  processesPerNode: 2", "Worker", 1, fixed(2)),
    (
        "nodes: 1",
        "Master",
        0,
        {**fixed(0), "PET_NNODES": "1", "PET_NPROC_PER_NODE": "1", "WORLD_SIZE": "1"},
    ),
    ("nodes: {min: 1, max: 3}", "Worker", 0, ELASTIC),
    ("nodes: {min: 1, max: 3}", "Worker", 2, ELASTIC),
]


@pytest.mark.parametrize(("extra", "rtype", "index", "expected"), CASES)
def test_operator_variables_match_the_contract(
    extra: str, rtype: str, index: int, expected: dict[str, str], tmp_path: Path
) -> None:
    plan = plan_of(manifest(f"  {extra}\n"))
    (pod,) = [p for p in plan.pods if (p.type, p.index) == (rtype, index)]
    env = replica_env(pod, hosts=plan.hosts, port=PORT, base={}, tmpdir=tmp_path)
    assert {k: v for k, v in env.items() if k in OPERATOR_VARS} == expected


def test_replicas_are_those_the_operator_creates() -> None:
    names = [r.name for r in replicas_of(manifest("  nodes: 3\n"))]
    assert names == ["job-master-0", "job-worker-0", "job-worker-1"]
    assert [r.name for r in replicas_of(manifest("  nodes: {min: 1, max: 2}\n"))] == [
        "job-worker-0",
        "job-worker-1",
    ]


def test_container_env_is_resolved_and_the_caller_leaks_nothing(tmp_path: Path) -> None:
    pod = first_pod(manifest("  nodes: 2\n  env: {MY_FLAG: 'on'}\n"), "Worker")
    base = {"PATH": "/usr/bin", "RANK": "7", "PET_NNODES": "9", "KCTL_TRAIN_SPEC": "{}"}
    env = replica_env(pod, port=PORT, base=base, tmpdir=tmp_path)
    assert env["PATH"] == "/usr/bin"
    assert env["MY_FLAG"] == "on"
    assert env["RANK"] == "1" and env["PET_NNODES"] == "2"  # the operator's, not the shell's
    assert env["KCTL_TRAIN_SPEC"].startswith('{"apiVersion"')  # the container's
    assert env["KCTL_TRAIN_POD_IP"] == "127.0.0.1"  # the downward API's status.podIP
    assert env["TMPDIR"] == str(tmp_path) and env["HOME"] == str(tmp_path)  # the pod's /tmp


def test_secret_keys_come_from_the_callers_environment(tmp_path: Path) -> None:
    pod = first_pod(
        manifest("  storage: {uri: 's3://bucket/runs', credentialsSecret: s3}\n"), "Master"
    )
    base = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    env = replica_env(pod, port=PORT, base=base, tmpdir=tmp_path)
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("id", "secret")
    with pytest.raises(
        PodEnvError,
        match="--secret FILE, or set your environment variable AWS_SECRET_ACCESS_KEY",
    ):
        replica_env(pod, port=PORT, base={"AWS_ACCESS_KEY_ID": "id"}, tmpdir=tmp_path)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("job-master-0", "127.0.0.1"),
        ("job-worker-12", "127.0.0.1"),
        ("other-master-0", "other-master-0"),
        ("job-worker-x", "job-worker-x"),
        ("rdzv.example.com", "rdzv.example.com"),
    ],
)
def test_only_this_jobs_services_map_to_loopback(host: str, expected: str) -> None:
    assert loopback_for(plan_of(manifest("  nodes: 14\n")).hosts)(host) == expected


def test_the_installed_runtime_stands_in_for_the_image(tmp_path: Path) -> None:
    container = first_pod(manifest("  nodes: 1\n"), "Master").container
    (tmp_path / "kctl-train-runtime").write_text("#!/bin/sh\n")
    assert replica_command(container, tmp_path) == [str(tmp_path / "kctl-train-runtime")]
    with pytest.raises(PodEnvError, match="is not installed here"):
        replica_command({"command": ["no-such-program-xyz"]}, tmp_path)


def test_a_trainjob_node_gets_only_the_torch_plugins_variables(tmp_path: Path) -> None:
    """As processes on one machine: the master's name maps to loopback, the free port
    replaces 29500, and nothing of the training-operator's appears."""
    plan = plan_of(manifest("  operator: trainjob\n  nodes: 3\n", "tj"))
    (node,) = [p for p in plan.pods if p.index == 2]
    assert node.name == "tj-node-0-2"
    env = replica_env(node, hosts=plan.hosts, port=PORT, base={"RANK": "7"}, tmpdir=tmp_path)
    assert {k: v for k, v in env.items() if k in OPERATOR_VARS | {"JOB_COMPLETION_INDEX"}} == {
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(PORT),
        "JOB_COMPLETION_INDEX": "2",
    }
    address = loopback_for(plan.hosts)
    assert address("tj-node-0-0.tj") == address("tj-node-0-1") == "127.0.0.1"
    assert address("tj-node-0-3") == "tj-node-0-3"  # not a pod of this job


@pytest.mark.parametrize(
    ("text", "delays"),
    [(None, (1.0, 30.0)), ("0.1,0.2", (0.1, 0.2)), ("2", (2.0, 2.0)), ("5,1", None), ("x", None)],
)
def test_the_restart_backoff_setting(text: str | None, delays: tuple[float, float] | None) -> None:
    env = {} if text is None else {RESTART_BACKOFF_ENV: text}
    if delays is None:
        with pytest.raises(ValueError, match="use FIRST,MAX seconds"):
            restart_delays(env)
    else:
        assert restart_delays(env) == delays
