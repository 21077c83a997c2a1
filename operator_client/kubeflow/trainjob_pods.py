"""How Kubeflow Trainer v2.3 and JobSet v0.12 turn a TrainJob and its runtime into pods,
as pure rules; docs/TRAINJOB.md ("The controllers' rules") cites the Go source of each.

- Every replicatedJob of the runtime is a group of pods, started in `dependsOn` order
  (initializers first, each to Complete, then the trainer's Job).
- The Job labelled `trainjob-ancestor-step: trainer` takes the TrainJob's `trainer`
  (container `node`); `dataset-initializer` and `model-initializer` take
  `spec.initializer.dataset` / `.model` (their containers of the same names).
- The runtime's ML policy decides the env: torch adds the PET_* variables and the
  rendezvous port to the trainer's container (only when the TrainJob has a `trainer`);
  no policy adds nothing; MPI needs SSH between pods and is refused here.
- runtimePatches are applied in order, as strategic merge patches (strategic_merge.py),
  after the admission rules Trainer's webhook applies to them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from . import trainjob as tj
from .groups import Group, WorkloadError
from .shapes import RUNTIME_SPEC, shape_errors
from .strategic_merge import merge

TRAINER, DATASET, MODEL = "trainer", "dataset-initializer", "model-initializer"
# The container each ancestor step's fields go to (pkg/constants/constants.go).
STEP_CONTAINER = {TRAINER: tj.CONTAINER_NAME, DATASET: DATASET, MODEL: MODEL}
# spec.initializer's key for each initializer step.
INITIALIZER_KEY = {DATASET: "dataset", MODEL: "model"}
# Trainer's torch plugin: the rendezvous port of every v2 release.
TORCH_PORT = 29500
# A Job's backoffLimit when its template gives none (Kubernetes' default).
JOB_BACKOFF_LIMIT = 6


@dataclass(frozen=True)
class Network:
    """JobSet's network: the headless Service (`subdomain`) and whether pods get DNS
    names from their hostnames at all."""

    subdomain: str
    dns_hostnames: bool = True


# Trainer v2.3.0 plugins whose env a local run does not reproduce (tests/fidelity shows the
# real ones), so their runtimes are refused rather than run differently.
UNMODELLED_POLICIES = {"jax": "JAX_*", "xgboost": "DMLC_*"}


def policy_of(runtime: Mapping[str, Any]) -> str | None:
    """The runtime's ML policy: "torch", "mpi", another source's name, or None."""
    ml = runtime.get("spec", {}).get("mlPolicy") or {}
    sources = [k for k, v in ml.items() if k != "numNodes" and v is not None]
    return sources[0] if sources else None


def patch_errors(manifest: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[str]:
    """Why Trainer's webhook refuses the TrainJob's runtimePatches and initializer against
    this runtime (pkg/runtime/framework/plugins/jobset/jobset.go, Validate): a patched
    replicatedJob or container the runtime lacks, or env on a container Trainer owns."""
    errors = []
    jobs = {str(j.get("name")): j for j in _replicated_jobs(runtime["spec"]["template"])}
    for i, patch in enumerate(manifest["spec"].get("runtimePatches") or []):
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for j, rjob in enumerate((template.get("spec") or {}).get("replicatedJobs") or []):
            where = (
                f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
            )
            name = rjob.get("name")
            if name not in jobs:
                errors.append(
                    f"{where}.name: Invalid value: {name!r}: must not have replicatedJob "
                    f"that doesn't exist in the runtime ({', '.join(sorted(jobs))})"
                )
                continue
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            have = {c["name"] for c in _containers(jobs[name], "containers")}
            have_init = {c["name"] for c in _containers(jobs[name], "initContainers")}
            for field, known in (("containers", have), ("initContainers", have_init)):
                for k, container in enumerate((pod.get("spec") or {}).get(field) or []):
                    at = f"{where}.template.spec.template.spec.{field}[{k}]"
                    if container.get("name") not in known:
                        errors.append(
                            f"{at}.name: Invalid value: {container.get('name')!r}: must not "
                            f"have container that doesn't exist in the runtime job {name!r}"
                        )
                    elif (
                        field == "containers"
                        and container.get("env") is not None
                        and (container["name"] in STEP_CONTAINER.values())
                    ):
                        errors.append(
                            f"{at}.env: Invalid value: must not have envs for the "
                            f"{container['name']} container: set them in spec.trainer.env "
                            "or spec.initializer instead"
                        )
    steps = {_step(j) for j in jobs.values()}
    for key, step in ((INITIALIZER_KEY[DATASET], DATASET), (INITIALIZER_KEY[MODEL], MODEL)):
        if (manifest["spec"].get("initializer") or {}).get(key) is not None and step not in steps:
            errors.append(
                f"spec.initializer.{key}: Invalid value: must have {step} job when trainJob "
                f"is configured with input {key}Config (the runtime has none)"
            )
    return errors


def build(
    manifest: Mapping[str, Any], runtime: Mapping[str, Any]
) -> tuple[tuple[Group, ...], Network]:
    """The TrainJob's groups of pods in start order, and its network."""
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    where = f"{runtime.get('kind', tj.RUNTIME_KIND)} {runtime['metadata']['name']}"
    problems = shape_errors(runtime.get("spec"), RUNTIME_SPEC, "spec")
    if problems:  # a runtime file no API server checked
        raise WorkloadError(f"{where}: " + "; ".join(problems))
    policy = policy_of(runtime)
    if policy == "mpi":
        raise WorkloadError(
            f"runtime {runtime['metadata']['name']} has an MPI policy: its launcher starts "
            "the nodes' processes over SSH (mpirun), which a local run does not provide; "
            "run it on a cluster"
        )
    if policy in UNMODELLED_POLICIES:
        raise WorkloadError(
            f"runtime {runtime['metadata']['name']} has a {policy} policy: its plugin's "
            f"variables ({UNMODELLED_POLICIES[policy]}) are not modelled here, so a local run "
            "would differ from the cluster's; run it on a cluster"
        )
    template = runtime["spec"]["template"]
    if (template.get("spec") or {}).get("volumeClaimPolicies"):
        raise WorkloadError(
            f"runtime {runtime['metadata']['name']} has volumeClaimPolicies: JobSet makes "
            "PersistentVolumeClaims for its pods, which a local run does not provision; run "
            "it on a cluster"
        )
    problems = patch_errors(manifest, runtime)
    if problems:
        raise WorkloadError("; ".join(problems))
    for patch in spec.get("runtimePatches") or []:
        template = merge(template, (patch.get("trainingRuntimeSpec") or {}).get("template") or {})
    network = (template.get("spec") or {}).get("network") or {}
    net = Network(
        subdomain=network.get("subdomain") or name,
        dns_hostnames=network.get("enableDNSHostnames") is not False,
    )
    ml = runtime["spec"].get("mlPolicy") or {}
    trainer = spec.get("trainer")
    groups = []
    for rjob in _in_start_order(_replicated_jobs(template)):
        step = _step(rjob)
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        pod = copy.deepcopy(dict(job_spec.get("template") or {}))
        pod.setdefault("spec", {})
        container = STEP_CONTAINER.get(step or "") or _first_container(rjob)
        if step == TRAINER and trainer is not None:
            pod = merge(pod, {"spec": {"containers": [_trainer_container(trainer)]}})
        if step in INITIALIZER_KEY:
            given = (spec.get("initializer") or {}).get(INITIALIZER_KEY[step])
            if given is not None:
                pod = merge(pod, {"spec": {"containers": [_initializer_container(step, given)]}})
        torch = step == TRAINER and policy == "torch"
        if torch:  # the torch plugin's rendezvous port (torch.go)
            _upsert_port(pod, container, {"containerPort": TORCH_PORT})
        pod_spec = pod["spec"]
        pod_spec.setdefault("restartPolicy", "OnFailure")  # JobSet's webhook default
        pod_spec["subdomain"] = net.subdomain
        if step == TRAINER:
            # trainer.numNodes (0 included), else the runtime's, else 1.
            count = _first_set((trainer or {}).get("numNodes"), ml.get("numNodes"), 1)
        else:
            count = int(rjob.get("replicas", 1)) * int(
                _first_set(job_spec.get("parallelism"), job_spec.get("completions"), 1)
            )
        backoff = job_spec.get("backoffLimit")
        groups.append(
            Group(
                type=rjob["name"],
                count=int(count),
                template=pod,
                restart_policy=pod_spec["restartPolicy"],
                backoff_limit=JOB_BACKOFF_LIMIT if backoff is None else int(backoff),
                container=container,
                depends_on=tuple(
                    (d["name"], d.get("status", "Complete")) for d in rjob.get("dependsOn") or []
                ),
                step=step,
                torch_nproc=(
                    torch_nproc(trainer, _node_resources(pod_spec))
                    if torch and trainer is not None
                    else None
                ),
            )
        )
    if not any(g.step == TRAINER for g in groups):
        raise WorkloadError(
            f"runtime {runtime['metadata']['name']}: no replicatedJob is labelled "
            f"{tj.ANCESTOR_LABEL}: {TRAINER}, so nothing takes the TrainJob's trainer"
        )
    return tuple(groups), net


def torch_env(job: str, group: Group, index: int) -> dict[str, str]:
    """The torch plugin's variables for one pod of the trainer's Job (torch.go)."""
    assert group.torch_nproc is not None
    return {
        "PET_NNODES": str(group.count),
        "PET_NPROC_PER_NODE": group.torch_nproc,
        "PET_NODE_RANK": str(index),
        # The subdomain is the TrainJob's name here, whatever the runtime's network says.
        "PET_MASTER_ADDR": f"{tj.pod_hostname(job, group.type, 0)}.{job}",
        "PET_MASTER_PORT": str(TORCH_PORT),
    }


def torch_nproc(trainer: Mapping[str, Any], node_resources: Mapping[str, Any] | None) -> str:
    """PET_NPROC_PER_NODE as the torch plugin (v2.3.0 torch.go) computes it: the TrainJob's
    numProcPerNode; else `auto`, which, unless the node's resources hold a GPU, becomes the
    CPU count, at least 1 (so 1 where no CPU is given anywhere). The node's resources are
    the TrainJob's resourcesPerNode, else the runtime's `node` container's
    (ExtractResourcePerNodeFromRuntime). A runtime's mlPolicy.torch has no numProcPerNode in
    v2.3.0."""
    if trainer.get("numProcPerNode") is not None:
        return str(int(trainer["numProcPerNode"]))
    resources = trainer.get("resourcesPerNode")
    if resources is None:  # an empty resourcesPerNode still replaces the runtime's
        resources = node_resources or {}
    if _gpus(resources) > 0:
        return "auto"
    # Imported here: pydantic's core is a cost that commands which only look at jobs
    # (status, logs) never pay (spec/__init__.py).
    from ..spec.units import parse_quantity

    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    cpu = parse_quantity(str(requests["cpu"])) if "cpu" in requests else Decimal(0)
    if cpu <= 0 and "cpu" in limits:  # a zero request falls back to the limit
        cpu = parse_quantity(str(limits["cpu"]))
    return str(max(1, math.ceil(cpu)))


def _upsert_port(pod: dict[str, Any], container: str, port: dict[str, Any]) -> None:
    """apply.UpsertPort: the port replaces the first of the container's with the same
    number or the same name (so an unnamed runtime port gives way to an unnamed 29500),
    else it is added."""
    for item in pod["spec"].get("containers") or []:
        if item.get("name") != container:
            continue
        ports = item.setdefault("ports", [])
        for i, given in enumerate(ports):
            same_port = given.get("containerPort") == port["containerPort"]
            if same_port or given.get("name") == port.get("name"):
                ports[i] = port
                return
        ports.append(port)
        return


def _node_resources(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The resources of the runtime's `node` container (before the TrainJob's own)."""
    for container in pod_spec.get("containers") or []:
        if container.get("name") == tj.CONTAINER_NAME and container.get("resources") is not None:
            return container["resources"]  # type: ignore[no-any-return]
    return None


def _gpus(resources: Mapping[str, Any]) -> Decimal:
    """The GPU count: the first resource named like *gpu* (any case), requests first,
    then limits; a request of 0 does not hide a positive limit."""
    from ..spec.units import parse_quantity

    for kind in ("requests", "limits"):
        for key, value in (resources.get(kind) or {}).items():
            if "gpu" in key.lower():
                count = parse_quantity(str(value))
                if count > 0:
                    return count
                break
    return Decimal(0)


def _trainer_container(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """`trainer` as a patch of container `node`: image, command and args replace the
    runtime's, env merges by name, resources key by key."""
    container: dict[str, Any] = {"name": tj.CONTAINER_NAME}
    container.update({k: trainer[k] for k in ("image", "command", "args", "env") if k in trainer})
    if trainer.get("resourcesPerNode") is not None:
        container["resources"] = trainer["resourcesPerNode"]
    return container


def _initializer_container(step: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """spec.initializer.dataset / .model as a patch of the initializer's container:
    STORAGE_URI from storageUri, then its env."""
    env = [{"name": "STORAGE_URI", "value": given["storageUri"]}] if given.get("storageUri") else []
    return {"name": step, "env": [*env, *(given.get("env") or [])]}


def _replicated_jobs(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((template.get("spec") or {}).get("replicatedJobs") or [])


def _step(rjob: Mapping[str, Any]) -> str | None:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(tj.ANCESTOR_LABEL)


def _containers(rjob: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
    return list((pod.get("spec") or {}).get(field) or [])


def _first_container(rjob: Mapping[str, Any]) -> str:
    containers = _containers(rjob, "containers")
    if not containers:
        raise WorkloadError(f"replicatedJob {rjob.get('name')!r} has no containers")
    return str(containers[0]["name"])


def _first_set(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _in_start_order(jobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The replicated Jobs with each after those it depends on (JobSet's webhook allows
    dependsOn only on Jobs listed before, so this is the list order where valid)."""
    names = {j["name"] for j in jobs}
    done: list[Mapping[str, Any]] = []
    for job in jobs:
        for dep in job.get("dependsOn") or []:
            if dep.get("name") not in names or dep["name"] not in {d["name"] for d in done}:
                raise WorkloadError(
                    f"replicatedJob {job['name']!r} depends on {dep.get('name')!r}, which is "
                    "not a replicatedJob listed before it"
                )
            if dep.get("status", "Complete") not in ("Complete", "Ready"):
                raise WorkloadError(
                    f"replicatedJob {job['name']!r}: dependsOn status {dep.get('status')!r} "
                    "is neither Complete nor Ready"
                )
        done.append(job)
    return done
