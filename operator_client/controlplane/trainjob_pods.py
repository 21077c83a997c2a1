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

from ..contract import DEFAULT_BACKOFF_LIMIT
from ..kubeflow import trainjob as tj
from ..kubeflow.shapes import RUNTIME_SPEC, shape_errors
from ..spec.quantities import parse_quantity
from .groups import Group, WorkloadError
from .strategic_merge import merge
from .trainjob_admission import (
    INITIALIZER_KEY,
    STEP_CONTAINER,
    TRAINER,
    api_errors,
    containers,
    injection_targets,
    policy_of,
    replicated_jobs,
    runtime_errors,
    step_of,
    trainjob_runtime_errors,
)

# Trainer's torch plugin: the rendezvous port of every v2 release.
TORCH_PORT = 29500


@dataclass(frozen=True)
class JobSetNetwork:
    """JobSet's network: the headless Service (`subdomain`) and whether pods get DNS
    names from their hostnames at all."""

    subdomain: str
    dns_hostnames: bool = True


# Trainer v2.3.0 plugins whose env a local run does not reproduce (tests/fidelity shows the
# real ones), so their runtimes are refused rather than run differently.
UNMODELLED_POLICIES = {"jax": "JAX_*", "xgboost": "DMLC_*"}


def build(
    manifest: Mapping[str, Any], runtime: Mapping[str, Any]
) -> tuple[tuple[Group, ...], JobSetNetwork]:
    """The TrainJob's groups of pods in start order, and its network."""
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    where = f"{runtime.get('kind', tj.RUNTIME_KIND)} {runtime['metadata']['name']}"
    problems = shape_errors(runtime.get("spec"), RUNTIME_SPEC, "spec")
    if problems:  # a runtime file no API server checked
        raise WorkloadError(f"{where}: " + "; ".join(problems))
    policy = policy_of(runtime)
    template = runtime["spec"]["template"]
    problems = runtime_errors(runtime)
    if problems:
        raise WorkloadError(f"{where} is refused by Trainer's webhook: " + "; ".join(problems))
    unmodelled = _unmodelled(spec, runtime)
    if unmodelled:
        raise WorkloadError(
            f"{unmodelled}, which a local run does not reproduce; run it on a cluster"
        )
    for patch in spec.get("runtimePatches") or []:
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        template = merge(template, patched, whole=frozenset())
    problems = trainjob_runtime_errors(manifest, runtime, template)
    if problems:
        raise WorkloadError("; ".join(problems))
    network = (template.get("spec") or {}).get("network") or {}
    net = JobSetNetwork(
        subdomain=network.get("subdomain") or name,
        dns_hostnames=network.get("enableDNSHostnames") is not False,
    )
    ml = runtime["spec"].get("mlPolicy") or {}
    trainer = spec.get("trainer")
    injected = injection_targets(runtime) if policy == "torch" else []
    groups = []
    for rjob in _in_start_order(replicated_jobs(template)):
        step = step_of(rjob)
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        pod = copy.deepcopy(dict(job_spec.get("template") or {}))
        pod.setdefault("spec", {})
        container = STEP_CONTAINER.get(step or "") or _first_container(rjob)
        if step == TRAINER and trainer is not None:
            pod = merge(pod, {"spec": {"containers": [_trainer_container(trainer)]}})
        if step in INITIALIZER_KEY:
            given = (spec.get("initializer") or {}).get(INITIALIZER_KEY[step])
            if given is not None:
                _initialize(pod, step, given)
        torch = step == TRAINER and policy == "torch"
        # The torch plugin's variables and rendezvous port go to the trainer's container
        # only when the TrainJob has a trainer (torch.go); envInjection's to its targets.
        targets = [c for j, c in injected if j == rjob["name"]]
        if torch and trainer is not None:
            _upsert_port(pod, container, {"containerPort": TORCH_PORT})
            targets.insert(0, container)
        pod_spec = pod["spec"]
        pod_spec.setdefault("restartPolicy", "OnFailure")  # JobSet's webhook default
        pod_spec["subdomain"] = net.subdomain
        count = _job_pods(rjob)
        if step == TRAINER:
            # trainer.numNodes (0 included), else under an mlPolicy its numNodes or 1
            # (core/trainingruntime.go), else the Job's own parallelism.
            if runtime["spec"].get("mlPolicy") is not None:
                count = ml.get("numNodes") or 1
            count = _first_set((trainer or {}).get("numNodes"), count)
        backoff = job_spec.get("backoffLimit")
        groups.append(
            Group(
                type=rjob["name"],
                count=int(count),
                template=pod,
                restart_policy=pod_spec["restartPolicy"],
                backoff_limit=DEFAULT_BACKOFF_LIMIT if backoff is None else int(backoff),
                container=container,
                depends_on=tuple(
                    (d["name"], d.get("status", "Complete")) for d in rjob.get("dependsOn") or []
                ),
                step=step,
                torch_nproc=(
                    torch_nproc(trainer or {}, _node_resources(pod_spec)) if torch else None
                ),
                torch_targets=tuple(targets),
            )
        )
    problems = api_errors(name, groups)
    if problems:
        raise WorkloadError(
            "the API server would refuse what the controllers make of it, so it would never "
            "run as written: " + "; ".join(problems)
        )
    if not any(g.step == TRAINER for g in groups):
        raise WorkloadError(
            f"runtime {runtime['metadata']['name']}: no replicatedJob is labelled "
            f"{tj.ANCESTOR_LABEL}: {TRAINER}, so nothing takes the TrainJob's trainer"
        )
    return tuple(groups), net


def torch_env(job: str, trainer: Group, index: int) -> dict[str, str]:
    """The torch plugin's variables for pod `index` of a Job it writes them into (torch.go),
    from the trainer's Job."""
    assert trainer.torch_nproc is not None
    return {
        "PET_NNODES": str(trainer.count),
        "PET_NPROC_PER_NODE": trainer.torch_nproc,
        "PET_NODE_RANK": str(index),
        # Hard-coded in Go: the Job `node` and the TrainJob's name as the subdomain, whatever
        # the trainer's Job is called and the runtime's network says.
        "PET_MASTER_ADDR": f"{tj.node_hostname(job, 0)}.{job}",
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
    container.update({k: trainer[k] for k in ("image", "command", "args") if k in trainer})
    if trainer.get("env") is not None:
        container["env"] = [env_var(e) for e in trainer["env"]]
    if trainer.get("resourcesPerNode") is not None:
        container["resources"] = trainer["resourcesPerNode"]
    return container


def _initialize(pod: dict[str, Any], step: str, given: Mapping[str, Any]) -> None:
    """spec.initializer.dataset / .model into the initializer's container (jobset/
    builder.go, Initializer): STORAGE_URI from storageUri, then its env, upserted by
    name; its secretRef appended to envFrom."""
    env = [{"name": "STORAGE_URI", "value": given["storageUri"]}] if given.get("storageUri") else []
    env += [env_var(e) for e in given.get("env") or []]
    patched = merge(pod, {"spec": {"containers": [{"name": step, "env": env}]}})
    pod["spec"] = patched["spec"]
    if given.get("secretRef") is not None:
        for container in pod["spec"].get("containers") or []:
            if container.get("name") == step:
                source = {"secretRef": {"name": given["secretRef"].get("name", "")}}
                container["envFrom"] = [*(container.get("envFrom") or []), source]


# The fields of each env source that Trainer's apply.EnvVar carries over (pkg/apply).
_ENV_SOURCE_FIELDS = {
    "fieldRef": ("fieldPath",),
    "resourceFieldRef": ("containerName", "resource", "divisor"),
    "configMapKeyRef": ("key", "name", "optional"),
    "secretKeyRef": ("key", "name", "optional"),
}


def env_var(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An env entry of the TrainJob as Trainer copies it (apply.EnvVar): with a valueFrom
    only that (a value beside it is dropped) and its sources' known fields (a fieldRef's
    apiVersion is the API server's default again); else the value."""
    source = entry.get("valueFrom")
    if source is None:
        return {"name": entry.get("name"), "value": entry.get("value", "")}
    kept: dict[str, Any] = {}
    for kind, fields in _ENV_SOURCE_FIELDS.items():
        ref = source.get(kind)
        if ref is None:
            continue
        kept[kind] = {f: ref[f] for f in fields if ref.get(f) not in (None, "")}
    return {"name": entry.get("name"), "valueFrom": kept}


def _unmodelled(spec: Mapping[str, Any], runtime: Mapping[str, Any]) -> str:
    """What of this TrainJob and runtime a local run would do differently from the
    cluster, so it is refused ('' where nothing)."""
    name = f"runtime {runtime['metadata']['name']}"
    policy = policy_of(runtime)
    runtime_spec = runtime.get("spec") or {}
    template = runtime_spec.get("template") or {}
    if policy == "mpi":
        return f"{name} has an MPI policy: its launcher starts the nodes' processes over SSH"
    if policy in UNMODELLED_POLICIES:
        return f"{name} has a {policy} policy: its plugin sets {UNMODELLED_POLICIES[policy]}"
    if (template.get("spec") or {}).get("volumeClaimPolicies"):
        return f"{name} has volumeClaimPolicies: JobSet makes PersistentVolumeClaims"
    if runtime_spec.get("podGroupPolicy"):
        return (
            f"{name} has a podGroupPolicy: Trainer makes a PodGroup for a gang scheduler "
            "(coscheduling or Volcano)"
        )
    if policy == "torch" and (spec.get("trainer") or {}).get("command") == ["tune", "run"]:
        return (
            "spec.trainer.command `tune run`: the torch plugin rewrites it for torchtune "
            "(recipe, config and rendezvous by model and size)"
        )
    for rjob in replicated_jobs(template):
        if step_of(rjob) in STEP_CONTAINER:
            continue  # Trainer makes these one Job of the pods it decides
        if rjob.get("replicas", 1) != 1:
            return (
                f"replicatedJob {rjob.get('name')!r} has replicas {rjob['replicas']}: JobSet "
                "makes a Job of each, each with its own completion indexes from 0"
            )
    return ""


def _job_pods(rjob: Mapping[str, Any]) -> int:
    """The pods of a replicatedJob's one Job: its parallelism, at least 1; Trainer sets
    its completions to the same (core/trainingruntime.go, jobset.go SyncParallelCount)."""
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    return max(int(_first_set(job_spec.get("parallelism"), 1)), 1)


def _first_container(rjob: Mapping[str, Any]) -> str:
    """The main container of a Job no step owns: its first ('' for none, which the API
    server refuses: api_errors)."""
    found = containers(rjob, "containers")
    return str(found[0].get("name")) if found else ""


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
