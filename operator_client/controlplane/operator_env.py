"""The environment the training-operator (v1.9.4) adds to each replica's containers.

A pure function of the PyTorchJob, replica type and index (docs/OPERATOR_CONTRACT.md). The
local backend runs replicas with exactly this environment (as processes on one machine,
with the job's Service names as loopback and a free port: local_env.on_one_machine); the
runtime's rank discovery is tested against it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..kubeflow import pytorchjob as pj


def _port(manifest: Mapping[str, Any], replica_type: str) -> int:
    template = manifest["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
    for container in template["spec"]["containers"]:
        if container["name"] == pj.CONTAINER_NAME:
            for port in container.get("ports", []):
                if port.get("name") == pj.PORT_NAME:
                    return int(port["containerPort"])
    return pj.DEFAULT_PORT


def _given(mapping: Mapping[str, Any] | None, key: str) -> Any:
    """A field as Go sees it: absent and an explicit null are both nil."""
    return mapping.get(key) if mapping is not None else None


def _replicas(replica_spec: Mapping[str, Any] | None) -> int:
    """A replica spec's replicas after setDefaultReplicas: nil becomes 1."""
    value = _given(replica_spec, "replicas")
    return 1 if value is None else int(value)


INT64 = 2**63
INT32 = 2**31


def go_atoi(text: str) -> int | None:
    """Go's strconv.Atoi on a 64-bit platform: an optional sign and decimal digits, in
    range; None where Go returns an error."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -INT64 <= value < INT64 else None


def _wrap(value: int, half: int = INT64) -> int:
    """Go integer arithmetic: overflow wraps (int is 64 bits, int32 32)."""
    return (value + half) % (2 * half) - half


def nproc_per_node(spec: Mapping[str, Any]) -> str | None:
    """spec.nprocPerNode after the operator's defaulting: "auto" when it is nil, unless
    the deprecated elasticPolicy.nProcPerNode is set (then it stays nil)."""
    nproc = _given(spec, "nprocPerNode")
    if nproc is not None:
        return str(nproc)
    if _given(_given(spec, "elasticPolicy") or {}, "nProcPerNode") is not None:
        return None
    return pj.DEFAULT_NPROC_PER_NODE


def operator_env(manifest: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """Variables appended to the env of every container of one replica pod, in the
    operator's order (setPodEnv, v1.9.4): the Master's variables whenever a Master exists,
    then PET_NPROC_PER_NODE, then the elastic ones or PET_NNODES."""
    spec = manifest["spec"]
    name = manifest["metadata"]["name"]
    # The API server drops a null replica spec (`Worker: null`): a Master-only job.
    replicas = {k: v for k, v in spec["pytorchReplicaSpecs"].items() if v is not None}
    # getTotalReplicas sums int32 replica counts in an int32.
    total = _wrap(sum(_replicas(r) for r in replicas.values()), INT32)
    nproc = nproc_per_node(spec)
    env = {"PYTHONUNBUFFERED": "1"}
    if replicas.get(pj.MASTER) is not None:
        master_port = _port(manifest, pj.MASTER)
        master = pj.pod_name(name, pj.MASTER, 0)
        rank = index + 1 if replica_type == pj.WORKER else index
        # getNprocPerNodeInt: the integer, else 1 ("auto", "gpu", nil, a bad number).
        factor = go_atoi(nproc) if nproc is not None else None
        env.update(
            {
                "MASTER_PORT": str(master_port),
                "PET_MASTER_PORT": str(master_port),
                "MASTER_ADDR": master,
                "PET_MASTER_ADDR": master,
                "WORLD_SIZE": str(_wrap(total * (factor if factor is not None else 1))),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
            }
        )
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = nproc
    elastic = _given(spec, "elasticPolicy")
    if elastic is not None:
        env.update(_elastic_env(manifest, elastic))
    else:
        env["PET_NNODES"] = str(total)
    return env


def _elastic_env(manifest: Mapping[str, Any], elastic: Mapping[str, Any]) -> dict[str, str]:
    """ElasticEnvVarGenerator, after setElasticPolicy's defaults (min and max fill each
    other, or both come from the Worker replicas)."""
    name = manifest["metadata"]["name"]
    workers = _replicas(manifest["spec"]["pytorchReplicaSpecs"].get(pj.WORKER))
    lo, hi = _given(elastic, "minReplicas"), _given(elastic, "maxReplicas")
    lo = lo if lo is not None else hi if hi is not None else workers
    hi = hi if hi is not None else lo
    # Pointers in Go: an empty host, port 0 or empty backend is set, not defaulted.
    host = _given(elastic, "rdzvHost")
    host = pj.pod_name(name, pj.WORKER, 0) if host is None else host
    rdzv_port = _given(elastic, "rdzvPort")
    rdzv_port = _port(manifest, pj.WORKER) if rdzv_port is None else rdzv_port
    backend = _given(elastic, "rdzvBackend")
    env = {
        "PET_RDZV_ENDPOINT": f"{host}:{rdzv_port}",
        "PET_RDZV_BACKEND": "c10d" if backend is None else str(backend),
        "PET_NNODES": f"{lo}:{hi}",
    }
    if _given(elastic, "maxRestarts") is not None:
        env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
    if _given(elastic, "nProcPerNode") is not None:  # deprecated; never rendered
        env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
    if _given(elastic, "rdzvId") is not None:
        env["PET_RDZV_ID"] = str(elastic["rdzvId"])
    if _given(elastic, "rdzvConf"):  # an empty list crashes the operator (webhook.py refuses it)
        env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
    if _given(elastic, "standalone"):
        env["PET_STANDALONE"] = ""
    return env
