"""The pods a rendered job asks for, whichever operator's object it is: a PyTorchJob's
replica specs as written, a TrainJob's node pods as Trainer v2.3 and JobSet v0.12 build
them from its runtime (docs/TRAINJOB.md). Pure; the local backend runs these pods with
the env each operator adds, and the lifecycle rules (lifecycle.py) read their policies here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import pytorchjob as pj
from . import trainjob as tj
from .operator_env import operator_env
from .strategic_merge import merge

# Trainer's torch plugin: the rendezvous port of every v2 release.
TRAINJOB_MASTER_PORT = 29500
# A Job's backoffLimit when its template gives none (Kubernetes' default).
JOB_BACKOFF_LIMIT = 6


class WorkloadError(ValueError):
    """The object cannot be turned into pods here (an unknown kind or runtime)."""


def _identity(host: str) -> str:
    return host


@dataclass(frozen=True)
class Group:
    """The pods of one replica type: a PyTorchJob's Master or Worker, a TrainJob's node Job."""

    type: str
    count: int
    template: Mapping[str, Any]  # the pod template: metadata and spec
    restart_policy: str
    backoff_limit: int | None  # the Job's own (TrainJob); a PyTorchJob's is in runPolicy


@dataclass(frozen=True)
class Workload:
    manifest: Mapping[str, Any]
    groups: tuple[Group, ...]

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"].get("namespace", "default"))

    @property
    def trainjob(self) -> bool:
        return self.kind == tj.KIND

    @property
    def container_name(self) -> str:
        return tj.CONTAINER_NAME if self.trainjob else pj.CONTAINER_NAME

    @property
    def count(self) -> int:
        return sum(g.count for g in self.groups)

    def group(self, replica_type: str) -> Group:
        for g in self.groups:
            if g.type == replica_type:
                return g
        raise WorkloadError(f"no replica type {replica_type!r}")

    def pods(self) -> list[tuple[str, str, int]]:
        """Every pod as (name, replica type, index), Master first. A TrainJob's pods are
        named by their hostname, `<job>-node-0-<i>` (a cluster adds 5 random characters)."""
        return [(self.pod_name(g.type, i), g.type, i) for g in self.groups for i in range(g.count)]

    def pod_name(self, replica_type: str, index: int) -> str:
        if self.trainjob:
            return tj.node_hostname(self.name, index)
        return pj.pod_name(self.name, replica_type, index)

    def dns_names(self, pod: str) -> tuple[str, ...]:
        """The names that resolve to a pod in its namespace: a PyTorchJob's per-pod Service;
        a TrainJob pod's hostname, alone and under the JobSet's headless Service."""
        return (pod, f"{pod}.{self.name}") if self.trainjob else (pod,)

    def pod_spec(self, replica_type: str) -> Mapping[str, Any]:
        return self.group(replica_type).template["spec"]  # type: ignore[no-any-return]

    def container(self, replica_type: str) -> dict[str, Any]:
        """The trainer container of one replica type, before the operator's env."""
        for container in self.pod_spec(replica_type).get("containers", []):
            if container["name"] == self.container_name:
                return dict(container)
        raise WorkloadError(f"{replica_type}: no container named {self.container_name!r}")

    def operator_env(
        self,
        replica_type: str,
        index: int,
        *,
        address: Callable[[str], str] = _identity,
        port: int | None = None,
    ) -> dict[str, str]:
        """What the operator adds to the trainer container's env of one pod. `address`
        maps a pod's DNS name to what a local run can reach, `port` replaces the
        rendezvous port (free ports on one machine)."""
        if not self.trainjob:
            return operator_env(self.manifest, replica_type, index, address=address, port=port)
        trainer = self.manifest["spec"].get("trainer")
        if trainer is None:  # the torch plugin adds nothing without spec.trainer
            return {}
        master = f"{tj.node_hostname(self.name, 0)}.{self.name}"
        return {
            # The Indexed Job's completion index (Kubernetes); PET_NODE_RANK reads it
            # through the downward API.
            "JOB_COMPLETION_INDEX": str(index),
            "PET_NNODES": str(self.count),
            "PET_NPROC_PER_NODE": torch_nproc(trainer, self.container(replica_type)),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": address(master),
            "PET_MASTER_PORT": str(port or TRAINJOB_MASTER_PORT),
        }


def torch_nproc(trainer: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """PET_NPROC_PER_NODE as the torch plugin computes it: numProcPerNode; else `auto`
    where the first resource named like *gpu* (requests, then limits) is above 0; else
    one process per CPU, rounded up, at least 1."""
    if trainer.get("numProcPerNode") is not None:
        return str(int(trainer["numProcPerNode"]))
    # Imported here, like the runtime below: pydantic's core is a cost that commands which
    # only look at jobs (status, logs) never pay (spec/__init__.py).
    from ..spec.units import parse_quantity

    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        gpus = [v for k, v in (resources.get(kind) or {}).items() if "gpu" in k]
        if gpus:
            if parse_quantity(str(gpus[0])) > 0:
                return "auto"
            break
    cpu = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    return str(max(1, math.ceil(parse_quantity(str(cpu))))) if cpu else "1"


def workload_of(
    manifest: Mapping[str, Any], runtimes: Mapping[str, Mapping[str, Any]] | None = None
) -> Workload:
    """The pods of a rendered PyTorchJob or TrainJob; `runtimes`: the
    ClusterTrainingRuntimes a TrainJob may name (default: kctl-train's own, built in)."""
    kind = manifest.get("kind")
    if kind == pj.KIND:
        return Workload(manifest, _pytorchjob_groups(manifest))
    if kind == tj.KIND:
        if runtimes is None:
            from .training_runtime import runtime

            runtimes = {tj.RUNTIME_NAME: runtime()}
        return Workload(manifest, (_trainjob_group(manifest, runtimes),))
    raise WorkloadError(f"kind {kind!r}: a job is a {pj.KIND} or a {tj.KIND}")


def _pytorchjob_groups(manifest: Mapping[str, Any]) -> tuple[Group, ...]:
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    backoff = manifest["spec"].get("runPolicy", {}).get("backoffLimit")
    return tuple(
        Group(
            rtype,
            int(specs[rtype].get("replicas", 1)),
            specs[rtype]["template"],
            # OnFailure is the operator's in-memory default for PyTorchJob replicas.
            specs[rtype].get("restartPolicy", "OnFailure"),
            backoff,
        )
        for rtype in pj.REPLICA_TYPES
        if rtype in specs
    )


def _trainjob_group(
    manifest: Mapping[str, Any], runtimes: Mapping[str, Mapping[str, Any]]
) -> Group:
    """The node Job's pods: the runtime's template with the TrainJob's runtimePatches
    applied in order, then `trainer` (image, command, args replaced; env and resources
    merged), then JobSet's defaults (restartPolicy OnFailure, the Service as subdomain)."""
    spec = manifest["spec"]
    ref = spec["runtimeRef"]
    found = runtimes.get(ref["name"])
    if ref.get("kind", tj.RUNTIME_KIND) != tj.RUNTIME_KIND or found is None:
        known = ", ".join(f"{tj.RUNTIME_KIND}/{n}" for n in sorted(runtimes))
        raise WorkloadError(
            f"spec.runtimeRef: {ref.get('kind', tj.RUNTIME_KIND)}/{ref['name']} is not here "
            f"(this backend has {known}); render with kctl-train, which names its own"
        )
    template = found["spec"]["template"]
    for patch in spec.get("runtimePatches") or []:
        template = merge(template, patch.get("trainingRuntimeSpec", {}).get("template", {}))
    jobs = {j["name"]: j for j in template["spec"]["replicatedJobs"]}
    if tj.REPLICATED_JOB not in jobs:
        raise WorkloadError(f"the runtime has no replicated Job {tj.REPLICATED_JOB!r}")
    job_spec = jobs[tj.REPLICATED_JOB]["template"]["spec"]
    trainer = spec.get("trainer") or {}
    # image, command and args replace the runtime's; env merges by name, resources key by key.
    container: dict[str, Any] = {"name": tj.CONTAINER_NAME}
    container.update({k: trainer[k] for k in ("image", "command", "args", "env") if k in trainer})
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    pod = merge(job_spec["template"], {"spec": {"containers": [container]}})
    pod["spec"].setdefault("restartPolicy", "OnFailure")
    pod["spec"]["subdomain"] = manifest["metadata"]["name"]
    ml = found["spec"].get("mlPolicy") or {}
    count = trainer.get("numNodes") or ml.get("numNodes") or 1
    backoff = job_spec.get("backoffLimit")
    return Group(
        tj.REPLICATED_JOB,
        int(count),
        pod,
        pod["spec"]["restartPolicy"],
        JOB_BACKOFF_LIMIT if backoff is None else int(backoff),
    )
