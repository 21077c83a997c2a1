"""Rank environment discovery: environment mapping (+ local GPU count) -> launch plan.

Pure. Each environment the runtime can find itself in is one small case below, tried in
order, in the manner of Lightning's cluster environments. docs/OPERATOR_CONTRACT.md and
docs/RUNTIME_NOTES.md list the variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..contract import POD_IP_ENV, RDZV_CONF

DEFAULT_PORT = 29500


class RankEnvError(Exception):
    """The environment is inconsistent; the message names the variables."""


@dataclass(frozen=True)
class Defaults:
    """What the spec says, used where the environment says nothing."""

    job_id: str = "kctl-train"
    max_restarts: int = 0
    nproc: str = "auto"


@dataclass(frozen=True)
class LaunchPlan:
    """How to start the torchrun elastic agent on this node."""

    source: str
    nnodes: str
    nproc_per_node: int
    rdzv_endpoint: str
    rdzv_id: str
    max_restarts: int
    rdzv_backend: str = "c10d"
    rdzv_conf: dict[str, str] = field(default_factory=dict)
    node_rank: int | None = None
    local_addr: str | None = None

    def torchrun_args(self) -> list[str]:
        """Options for `torch.distributed.run`, before the entry point."""
        args = [
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--rdzv-backend={self.rdzv_backend}",
            f"--rdzv-endpoint={self.rdzv_endpoint}",
            f"--rdzv-id={self.rdzv_id}",
            f"--max-restarts={self.max_restarts}",
        ]
        if self.rdzv_conf:
            args.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in self.rdzv_conf.items()))
        if self.node_rank is not None and self.rdzv_backend == "static":
            # c10d assigns node ranks itself and warns about an explicit one.
            args.append(f"--node-rank={self.node_rank}")
        if self.local_addr:
            args.append(f"--local-addr={self.local_addr}")
        return args


@dataclass(frozen=True)
class InWorker:
    """Already a torchrun worker: run the training directly, do not launch again."""

    rank: int
    world_size: int


Plan = LaunchPlan | InWorker


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except KeyError:
        raise RankEnvError(f"{name} is not set") from None
    except ValueError:
        raise RankEnvError(f"{name}={env[name]!r} is not an integer") from None


def nproc_per_node(value: str | None, gpus: int) -> int:
    """Processes per node: an integer as given; auto/gpu: one per GPU, and on a node
    without GPUs one process (torchrun would start one per CPU core)."""
    if value is None or value in ("auto", "gpu", "cpu"):
        return gpus if gpus > 0 and value != "cpu" else 1
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise RankEnvError(f"PET_NPROC_PER_NODE={value!r}: expected a positive integer or auto")


def _conf(text: str | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RankEnvError(f"PET_RDZV_CONF item {item!r} is not key=value")
        conf[key.strip()] = value.strip()
    return conf


def inside_torchrun(env: Mapping[str, str]) -> bool:
    """Whether this process is already a torchrun worker (torchrun's own variables)."""
    return "TORCHELASTIC_RUN_ID" in env and "LOCAL_RANK" in env


def _torchrun_worker(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    if not inside_torchrun(env):
        return None
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    if not 0 <= rank < world:
        raise RankEnvError(f"RANK={rank} is not below WORLD_SIZE={world}")
    return InWorker(rank, world)


def _elastic(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    if "PET_RDZV_ENDPOINT" not in env:
        return None
    endpoint = env["PET_RDZV_ENDPOINT"]
    if ":" not in endpoint or not endpoint.rsplit(":", 1)[1].isdigit():
        raise RankEnvError(f"PET_RDZV_ENDPOINT={endpoint!r} is not host:port")
    nnodes = env.get("PET_NNODES")
    if not nnodes:
        raise RankEnvError("PET_RDZV_ENDPOINT is set but PET_NNODES is not")
    lo, _, hi = nnodes.partition(":")
    if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(lo) > int(hi)):
        raise RankEnvError(f"PET_NNODES={nnodes!r}: expected N or MIN:MAX")
    return LaunchPlan(
        source="PyTorchJob (elastic)",
        nnodes=nnodes,
        nproc_per_node=nproc_per_node(env.get("PET_NPROC_PER_NODE"), gpus),
        rdzv_backend=env.get("PET_RDZV_BACKEND", "c10d"),
        rdzv_endpoint=endpoint,
        rdzv_id=env.get("PET_RDZV_ID") or d.job_id,
        rdzv_conf={**RDZV_CONF, **_conf(env.get("PET_RDZV_CONF"))},
        max_restarts=_int(env, "PET_MAX_RESTARTS") if "PET_MAX_RESTARTS" in env else d.max_restarts,
        local_addr=env.get(POD_IP_ENV) or None,
    )


def _pytorchjob_master(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    if "MASTER_ADDR" not in env or "PET_NNODES" not in env:
        return None
    if "MASTER_PORT" not in env:
        raise RankEnvError("MASTER_ADDR is set but MASTER_PORT is not")
    nnodes, rank = _int(env, "PET_NNODES"), _int(env, "RANK")
    world = _int(env, "WORLD_SIZE")
    if rank >= world or rank >= nnodes:
        raise RankEnvError(f"RANK={rank} is not below WORLD_SIZE={world} and PET_NNODES={nnodes}")
    endpoint = f"{env['MASTER_ADDR']}:{_int(env, 'MASTER_PORT')}"
    return _hosted("PyTorchJob (Master/Worker)", env, gpus, d, nnodes, rank, endpoint)


def _hosted(
    source: str,
    env: Mapping[str, str],
    gpus: int,
    d: Defaults,
    nnodes: int,
    rank: int,
    endpoint: str,
) -> LaunchPlan:
    """A fixed-size job's plan: c10d at node 0's address, its agent hosting the store,
    so every node may restart in place (the static backend cannot re-rendezvous)."""
    return LaunchPlan(
        source=source,
        nnodes=str(nnodes),
        nproc_per_node=nproc_per_node(env.get("PET_NPROC_PER_NODE"), gpus),
        rdzv_endpoint=endpoint,
        rdzv_id=d.job_id,
        rdzv_conf={**RDZV_CONF, "is_host": "true" if rank == 0 else "false"},
        max_restarts=d.max_restarts,
        node_rank=rank,
        local_addr=env.get(POD_IP_ENV) or None,
    )


def _trainjob(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    """Kubeflow Trainer v2 (a TrainJob's torch plugin) injects only PET_NNODES,
    PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's Job completion index), PET_MASTER_ADDR
    (`<trainjob>-node-0-0.<trainjob>`) and PET_MASTER_PORT (29500), and never MASTER_ADDR."""
    if "PET_MASTER_ADDR" not in env or "MASTER_ADDR" in env:
        return None
    if "PET_MASTER_PORT" not in env:
        raise RankEnvError("PET_MASTER_ADDR is set but PET_MASTER_PORT is not")
    nnodes_text = env.get("PET_NNODES", "")
    if not nnodes_text.isdigit() or int(nnodes_text) < 1:
        raise RankEnvError(
            f"PET_NNODES={nnodes_text!r}: a TrainJob runs a fixed number of nodes (Trainer v2 "
            "has no elastic range)"
        )
    if "PET_NODE_RANK" not in env:
        raise RankEnvError(
            "PET_MASTER_ADDR is set but PET_NODE_RANK is not (Trainer v2 sets it from the pod's "
            "batch.kubernetes.io/job-completion-index annotation)"
        )
    nnodes, rank = int(nnodes_text), _int(env, "PET_NODE_RANK")
    if not 0 <= rank < nnodes:
        raise RankEnvError(f"PET_NODE_RANK={rank} is not below PET_NNODES={nnodes}")
    # As for a PyTorchJob's Master (torchrun's default here, static, cannot re-join).
    endpoint = f"{env['PET_MASTER_ADDR']}:{_int(env, 'PET_MASTER_PORT')}"
    return _hosted("TrainJob (Kubeflow Trainer v2)", env, gpus, d, nnodes, rank, endpoint)


def _pytorchjob_without_endpoint(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    if "PET_NNODES" in env and env["PET_NNODES"] not in ("1", "1:1"):
        raise RankEnvError(
            f"PET_NNODES={env['PET_NNODES']} but neither PET_RDZV_ENDPOINT nor "
            "MASTER_ADDR is set: a Worker-only job without elasticPolicy cannot "
            "rendezvous (render it with a Master, or elastic)"
        )
    return None


def _slurm(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    if "SLURM_JOB_ID" not in env or "SLURM_NNODES" not in env:
        return None
    host = env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR")
    if not host:
        raise RankEnvError(
            "SLURM: set MASTER_ADDR (or SLURM_LAUNCH_NODE_IPADDR) to the first node's address"
        )
    nnodes = _int(env, "SLURM_NNODES")
    node = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    if node >= nnodes:
        raise RankEnvError(f"SLURM_NODEID={node} is not below SLURM_NNODES={nnodes}")
    tasks = env.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and int(tasks) != nnodes:
        raise RankEnvError(
            f"SLURM_NTASKS={tasks} but SLURM_NNODES={nnodes}: run one "
            "kctl-train-runtime per node (srun --ntasks-per-node=1)"
        )
    port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_PORT
    return LaunchPlan(
        source="SLURM",
        nnodes=str(nnodes),
        nproc_per_node=nproc_per_node(env.get("PET_NPROC_PER_NODE", d.nproc), gpus),
        rdzv_endpoint=f"{host}:{port}",
        rdzv_id=f"slurm-{env['SLURM_JOB_ID']}",
        rdzv_conf=dict(RDZV_CONF),
        max_restarts=d.max_restarts,
        node_rank=node,
    )


def _single_node(env: Mapping[str, str], gpus: int, d: Defaults) -> Plan | None:
    return LaunchPlan(
        source="single node",
        nnodes="1",
        nproc_per_node=nproc_per_node(env.get("PET_NPROC_PER_NODE", d.nproc), gpus),
        rdzv_endpoint=f"127.0.0.1:{env.get('MASTER_PORT', DEFAULT_PORT)}",
        rdzv_id=d.job_id,
        max_restarts=d.max_restarts,
        node_rank=0,
    )


_CASES = (
    _torchrun_worker,
    _elastic,
    _pytorchjob_master,
    _trainjob,
    _pytorchjob_without_endpoint,
    _slurm,
    _single_node,
)


def discover(env: Mapping[str, str], gpus: int, defaults: Defaults = Defaults()) -> Plan:
    """The launch plan for this node; RankEnvError names what is inconsistent."""
    if "PET_STANDALONE" in env:
        raise RankEnvError(
            "PET_STANDALONE is set (elasticPolicy.standalone): torchrun parses "
            "its empty value as an integer and fails; remove standalone"
        )
    for case in _CASES:
        plan = case(env, gpus, defaults)
        if plan is not None:
            return plan
    raise AssertionError("the single-node case always applies")  # pragma: no cover
