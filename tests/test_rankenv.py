"""Rank discovery, case by case, from the environment the operator really injects."""

from __future__ import annotations

import pytest

from operator_client.controlplane.operator_env import operator_env
from operator_client.render import render
from operator_client.runtime.rankenv import (
    Defaults,
    InWorker,
    LaunchPlan,
    RankEnvError,
    discover,
    nproc_per_node,
)
from operator_client.spec import load_job_text

HEAD = """\
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata: {name: demo}
spec:
  image: img
  train: {model: a.b:C}
"""
D = Defaults(job_id="demo", max_restarts=3)


def env_of(extra: str, rtype: str, index: int) -> dict[str, str]:
    manifest = render(load_job_text(HEAD + extra).job)
    return operator_env(manifest, rtype, index)


def plan(env: dict[str, str], gpus: int = 0) -> LaunchPlan:
    result = discover(env, gpus, D)
    assert isinstance(result, LaunchPlan)
    return result


@pytest.mark.parametrize(
    ("extra", "rtype", "index", "gpus", "expected"),
    [
        # fixed size, Master pod: hosts the c10d store at its own Service name
        (
            "  nodes: 3\n",
            "Master",
            0,
            0,
            dict(
                nnodes="3",
                nproc_per_node=1,
                rdzv_endpoint="demo-master-0:23456",
                node_rank=0,
                rdzv_id="demo",
                max_restarts=3,
                is_host="true",
            ),
        ),
        (
            "  nodes: 3\n",
            "Worker",
            1,
            0,
            dict(
                nnodes="3",
                nproc_per_node=1,
                rdzv_endpoint="demo-master-0:23456",
                node_rank=2,
                is_host="false",
            ),
        ),
        # GPUs: nprocPerNode is the GPU count
        (
            "  nodes: 2\n  resources: {gpus: 8}\n",
            "Worker",
            0,
            8,
            dict(nnodes="2", nproc_per_node=8, node_rank=1),
        ),
        # nproc auto on GPU pods: one per visible GPU
        (
            "  nodes: 2\n  resources: {gpus: 4}\n  processesPerNode: detect\n",
            "Master",
            0,
            4,
            dict(nproc_per_node=4),
        ),
        # elastic, Workers only
        (
            "  nodes: {min: 2, max: 4}\n  fault: {maxRestarts: 7}\n",
            "Worker",
            3,
            0,
            dict(
                nnodes="2:4",
                rdzv_endpoint="demo-worker-0:23456",
                rdzv_id="demo",
                max_restarts=7,
                node_rank=None,
                keep_alive_interval="1",
            ),
        ),
    ],
)
def test_pytorchjob_environments(
    extra: str, rtype: str, index: int, gpus: int, expected: dict[str, object]
) -> None:
    p = plan(env_of(extra, rtype, index), gpus)
    for key, value in expected.items():
        actual = (
            p.rdzv_conf.get(key) if key in ("is_host", "keep_alive_interval") else getattr(p, key)
        )
        assert actual == value, (key, p)
    assert p.rdzv_backend == "c10d"


@pytest.mark.parametrize(
    ("value", "gpus", "expected"),
    [("auto", 0, 1), ("auto", 8, 8), ("gpu", 2, 2), ("cpu", 8, 1), ("3", 0, 3), (None, 0, 1)],
)
def test_nproc_auto_never_means_one_per_core(value: str | None, gpus: int, expected: int) -> None:
    assert nproc_per_node(value, gpus) == expected


def test_pod_ip_becomes_the_local_address() -> None:
    env = {**env_of("  nodes: {min: 1, max: 2}\n", "Worker", 0), "KCTL_TRAIN_POD_IP": "10.0.0.5"}
    assert plan(env).local_addr == "10.0.0.5"
    assert "--local-addr=10.0.0.5" in plan(env).torchrun_args()


def test_inside_a_torchrun_worker_nothing_is_launched() -> None:
    env = {
        **env_of("  nodes: 2\n", "Master", 0),
        "TORCHELASTIC_RUN_ID": "x",
        "LOCAL_RANK": "0",
        "RANK": "3",
        "WORLD_SIZE": "4",
    }
    assert discover(env, 0, D) == InWorker(rank=3, world_size=4)


def test_slurm() -> None:
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_NNODES": "4",
        "SLURM_NODEID": "2",
        "SLURM_NTASKS": "4",
        "SLURM_LAUNCH_NODE_IPADDR": "10.1.1.1",
    }
    p = plan(env, 8)
    assert (p.source, p.nnodes, p.nproc_per_node, p.rdzv_endpoint, p.rdzv_id, p.node_rank) == (
        "SLURM",
        "4",
        8,
        "10.1.1.1:29500",
        "slurm-77",
        2,
    )


def test_single_process_fallback_uses_the_spec() -> None:
    p = discover({}, 0, Defaults(job_id="j", max_restarts=1, nproc="2"))
    assert isinstance(p, LaunchPlan)
    assert (p.source, p.nnodes, p.nproc_per_node, p.rdzv_endpoint) == (
        "single node",
        "1",
        2,
        "127.0.0.1:29500",
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PET_STANDALONE": "", "PET_RDZV_ENDPOINT": "a:1", "PET_NNODES": "1"}, "PET_STANDALONE"),
        (
            {
                "MASTER_ADDR": "m",
                "MASTER_PORT": "1",
                "PET_NNODES": "2",
                "RANK": "2",
                "WORLD_SIZE": "2",
            },
            "RANK=2 is not below WORLD_SIZE=2",
        ),
        (
            {"MASTER_ADDR": "m", "PET_NNODES": "2", "RANK": "0", "WORLD_SIZE": "2"},
            "MASTER_ADDR is set but MASTER_PORT is not",
        ),
        (
            {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "1"},
            "neither PET_RDZV_ENDPOINT nor MASTER_ADDR",
        ),
        ({"PET_RDZV_ENDPOINT": "host-without-port", "PET_NNODES": "1:2"}, "is not host:port"),
        ({"PET_RDZV_ENDPOINT": "h:1"}, "PET_NNODES is not"),
        ({"PET_RDZV_ENDPOINT": "h:1", "PET_NNODES": "4:2"}, "expected N or MIN:MAX"),
        (
            {"PET_RDZV_ENDPOINT": "h:1", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "x"},
            "PET_NPROC_PER_NODE='x'",
        ),
        (
            {"TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "0", "RANK": "5", "WORLD_SIZE": "2"},
            "RANK=5 is not below WORLD_SIZE=2",
        ),
        ({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2"}, "set MASTER_ADDR"),
    ],
)
def test_inconsistent_environments_name_the_variables(env: dict[str, str], message: str) -> None:
    with pytest.raises(RankEnvError) as info:
        discover(env, 0, D)
    assert message in str(info.value)


def test_torchrun_args_round_trip_through_torchrun_parser() -> None:
    pytest.importorskip("torch", reason="the runtime extra is not installed")
    from torch.distributed.run import get_args_parser

    p = plan(env_of("  nodes: {min: 2, max: 4}\n", "Worker", 1))
    args = get_args_parser().parse_args([*p.torchrun_args(), "-m", "x"])
    assert (args.nnodes, args.rdzv_backend, args.rdzv_id, args.max_restarts) == (
        "2:4",
        "c10d",
        "demo",
        3,
    )


def test_a_master_in_an_elastic_job_still_rendezvouses_elastically() -> None:
    """The operator gives a Master's variables to every pod of a job with a Master, elastic
    or not (test_operator_rules.py); the elastic rendezvous must win over MASTER_ADDR."""
    from .test_operator_rules import MASTER_WORKERS, job

    manifest = job({"pytorchReplicaSpecs": MASTER_WORKERS, "elasticPolicy": {"rdzvId": "x"}})
    env = operator_env(manifest, "Worker", 0)
    assert "MASTER_ADDR" in env
    launch = plan({**env, "PET_NPROC_PER_NODE": "1"})
    assert (launch.rdzv_endpoint, launch.nnodes, launch.rdzv_id) == ("j-worker-0:23456", "2:2", "x")


def trainjob_env(rank: int, nnodes: int = 3, nproc: str = "auto") -> dict[str, str]:
    """Exactly what Trainer v2.3's torch plugin puts in the `node` container of TrainJob
    `demo` (TRAINER_V2_CONTRACT §4); PET_NODE_RANK is the pod's completion index."""
    return {
        "PET_NNODES": str(nnodes),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "demo-node-0-0.demo",
        "PET_MASTER_PORT": "29500",
    }


@pytest.mark.parametrize(
    ("env", "gpus", "expected"),
    [
        # node 0 hosts the c10d store at the master address, on a GPU node: one per GPU
        (
            trainjob_env(0),
            8,
            dict(nnodes="3", nproc_per_node=8, node_rank=0, is_host="true"),
        ),
        # node 2 of 3 joins; on CPU the plugin passes an integer derived from the CPU request
        (
            trainjob_env(2, nproc="4"),
            0,
            dict(nnodes="3", nproc_per_node=4, node_rank=2, is_host="false"),
        ),
        # a lone node: auto on a CPU node is one process, not one per core
        (trainjob_env(0, nnodes=1), 0, dict(nnodes="1", nproc_per_node=1, node_rank=0)),
    ],
)
def test_trainjob_environments(env: dict[str, str], gpus: int, expected: dict[str, object]) -> None:
    p = plan(env, gpus)
    assert p.source == "TrainJob (Kubeflow Trainer v2)"
    assert (p.rdzv_endpoint, p.rdzv_backend, p.rdzv_id) == (
        "demo-node-0-0.demo:29500",
        "c10d",
        "demo",
    )
    assert p.max_restarts == D.max_restarts
    for key, value in expected.items():
        actual = p.rdzv_conf.get(key) if key == "is_host" else getattr(p, key)
        assert actual == value, (key, p)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"PET_MASTER_PORT": None}, "PET_MASTER_ADDR is set but PET_MASTER_PORT is not"),
        ({"PET_NODE_RANK": None}, "job-completion-index"),
        ({"PET_NODE_RANK": "3"}, "PET_NODE_RANK=3 is not below PET_NNODES=3"),
        ({"PET_NNODES": "1:3"}, "Trainer v2 has no elastic range"),
        ({"PET_NPROC_PER_NODE": "-2"}, "PET_NPROC_PER_NODE='-2'"),
    ],
)
def test_an_inconsistent_trainjob_environment_names_the_variable(
    change: dict[str, str | None], message: str
) -> None:
    env = {k: v for k, v in {**trainjob_env(1), **change}.items() if v is not None}
    with pytest.raises(RankEnvError) as info:
        discover(env, 0, D)
    assert message in str(info.value)
