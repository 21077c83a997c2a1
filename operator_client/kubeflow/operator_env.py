"""The environment the training-operator (v1.9.4) adds to each replica's containers.

A pure function of the PyTorchJob, replica type and index (docs/OPERATOR_CONTRACT.md). The
local backend runs replicas with exactly this environment; the runtime's rank discovery
is tested against it. `address` maps a Service hostname to what a local run can reach
(identity on a cluster), `port` replaces the container port (free ports on one machine).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import pytorchjob as pj


def _port(manifest: Mapping[str, Any], replica_type: str) -> int:
    template = manifest["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
    for container in template["spec"]["containers"]:
        if container["name"] == pj.CONTAINER_NAME:
            for port in container.get("ports", []):
                if port.get("name") == pj.PORT_NAME:
                    return int(port["containerPort"])
    return pj.DEFAULT_PORT


def _identity(host: str) -> str:
    return host


def operator_env(
    manifest: Mapping[str, Any],
    replica_type: str,
    index: int,
    *,
    address: Callable[[str], str] = _identity,
    port: int | None = None,
) -> dict[str, str]:
    """Variables appended to the `pytorch` container's env of one replica pod."""
    spec = manifest["spec"]
    name = manifest["metadata"]["name"]
    replicas = spec["pytorchReplicaSpecs"]
    nproc = str(spec.get("nprocPerNode", "auto"))
    env = {"PYTHONUNBUFFERED": "1"}
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        worker_count = int(replicas[pj.WORKER].get("replicas", 1))
        lo = elastic.get("minReplicas", elastic.get("maxReplicas", worker_count))
        hi = elastic.get("maxReplicas", lo)
        host = elastic.get("rdzvHost") or pj.pod_name(name, pj.WORKER, 0)
        rdzv_port = port or elastic.get("rdzvPort") or _port(manifest, pj.WORKER)
        env.update(
            {
                "PET_RDZV_ENDPOINT": f"{address(host)}:{rdzv_port}",
                "PET_RDZV_BACKEND": elastic.get("rdzvBackend", "c10d"),
                "PET_NNODES": f"{lo}:{hi}",
                "PET_NPROC_PER_NODE": nproc,
            }
        )
        if "maxRestarts" in elastic:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if "rdzvId" in elastic:
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
        if elastic.get("rdzvConf"):
            env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
        if elastic.get("standalone"):
            env["PET_STANDALONE"] = ""
        return env
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    env["PET_NNODES"] = str(total)
    env["PET_NPROC_PER_NODE"] = nproc
    if pj.MASTER not in replicas:
        return env  # Worker-only, non-elastic: no rendezvous information at all
    master_port = port or _port(manifest, pj.MASTER)
    master = address(pj.pod_name(name, pj.MASTER, 0))
    rank = 0 if replica_type == pj.MASTER else index + 1
    nproc_count = int(nproc) if nproc.isdigit() else 1
    env.update(
        {
            "MASTER_ADDR": master,
            "PET_MASTER_ADDR": master,
            "MASTER_PORT": str(master_port),
            "PET_MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(total * nproc_count),
            "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
        }
    )
    return env
