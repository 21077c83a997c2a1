"""What Kubeflow Trainer v2.3's webhooks and the API server refuse of a TrainJob and its
runtime, in their words (the Go sources are cited per rule), and the readers of a
runtime's replicated Jobs the rules and trainjob_pods.py share. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..kubeflow import trainjob as tj
from .groups import Group
from .pod_validation import pod_spec_errors

TRAINER, DATASET, MODEL = "trainer", "dataset-initializer", "model-initializer"
# The container each ancestor step's fields go to (pkg/constants/constants.go).
STEP_CONTAINER = {TRAINER: tj.CONTAINER_NAME, DATASET: DATASET, MODEL: MODEL}
# spec.initializer's key for each initializer step.
INITIALIZER_KEY = {DATASET: "dataset", MODEL: "model"}
# Names the torch plugin sets in the trainer container; its webhook refuses them in
# trainer.env (constants.TorchRunReservedEnvNames).
TORCH_RESERVED_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
# The volume an initializer's container must mount (jobset plugin constants).
INITIALIZER_VOLUME = "initializer"


def policy_of(runtime: Mapping[str, Any]) -> str | None:
    """The runtime's ML policy: "torch", "mpi", another source's name, or None."""
    ml = runtime.get("spec", {}).get("mlPolicy") or {}
    sources = [k for k, v in ml.items() if k != "numNodes" and v is not None]
    return sources[0] if sources else None


def runtime_errors(runtime: Mapping[str, Any]) -> list[str]:
    """Why Trainer's runtime webhooks refuse this runtime (v2.3.0 webhooks/
    trainingruntime_webhook.go, validateReplicatedJobs): a Job of an ancestor step with
    replicas other than 1, or without its step's container."""
    errors = []
    for i, rjob in enumerate(replicated_jobs(runtime.get("spec", {}).get("template") or {})):
        step = step_of(rjob)
        if step not in STEP_CONTAINER:
            continue
        where = f"spec.template.spec.replicatedJobs[{i}]"
        if rjob.get("replicas", 1) != 1:
            errors.append(f"{where}.replicas: Invalid value: {rjob['replicas']}: always must be 1")
        names = [str(c.get("name")) for c in containers(rjob, "containers")]
        if STEP_CONTAINER[step] not in names:
            errors.append(
                f"{where}.template.spec.template.spec.containers: Invalid value: {names}: must "
                f"contain the required container for the ancestor: {step}"
            )
    return errors


def trainjob_runtime_errors(
    manifest: Mapping[str, Any], runtime: Mapping[str, Any], template: Mapping[str, Any]
) -> list[str]:
    """Why Trainer's TrainJob webhook refuses the TrainJob against its runtime's template
    with the runtimePatches applied (v2.3.0 plugins/jobset/jobset.go and torch/torch.go,
    Validate; they check the patched template, so a patch may add a Job or container):
    an initializer without its Job, container or `initializer` volumeMount (by Job name),
    env patched onto a container Trainer owns, a torch plugin variable in trainer.env
    under a torch policy, an envInjection target that is not there."""
    spec = manifest["spec"]
    errors = []
    jobs = {str(j.get("name")): j for j in replicated_jobs(template)}
    ref = "spec.runtimeRef: Invalid value: " + str((spec.get("runtimeRef") or {}).get("name"))
    for key, step in ((INITIALIZER_KEY[DATASET], DATASET), (INITIALIZER_KEY[MODEL], MODEL)):
        if (spec.get("initializer") or {}).get(key) is None:
            continue
        if step not in jobs:
            errors.append(
                f"{ref}: must have {step} job when trainJob is configured with input {key}Config"
            )
            continue
        found = [c for c in containers(jobs[step], "containers") if c.get("name") == step]
        names = {c.get("name") for c in containers(jobs[step], "initContainers")}
        if not found and step not in names:
            errors.append(f"{ref}: must have container with name - {step} in the {step} job")
        elif not any(
            m.get("name") == INITIALIZER_VOLUME for c in found for m in c.get("volumeMounts") or []
        ):
            errors.append(
                f"{ref}: must have volumeMount with name - {INITIALIZER_VOLUME} in container "
                f"{step} of the {step} job"
            )
    for patch in spec.get("runtimePatches") or []:
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in replicated_jobs(patched):
            for container in containers(rjob, "containers"):
                if container.get("env") and container.get("name") in STEP_CONTAINER.values():
                    errors.append(
                        "spec.runtimePatches: Invalid value: must not have envs for the "
                        f"{DATASET}, {MODEL}, {tj.CONTAINER_NAME} containers"
                    )
    reserved = sorted(
        {str(e.get("name")) for e in (spec.get("trainer") or {}).get("env") or []}
        & set(TORCH_RESERVED_ENV)
    )
    if reserved and policy_of(runtime) == "torch":
        errors.append(
            "spec.trainer.env: Invalid value: must not have reserved envs, invalid envs "
            f"configured: [{' '.join(reserved)}]"
        )
    for job, target in injection_targets(runtime):
        if job not in jobs or not any(
            c.get("name") == target
            for field in ("initContainers", "containers")
            for c in containers(jobs[job], field)
        ):
            errors.append(
                f"spec.runtimeRef: Invalid value: envInjection target podSet {job!r} "
                f"container {target!r} not found in runtime template"
            )
    return errors


def api_errors(jobset: str, groups: Sequence[Group]) -> list[str]:
    """Why the API server refuses the JobSet or one of its Jobs that JobSet creates
    (k8s.io/kubernetes pkg/apis/batch/validation and core/validation, in their words): a
    replicatedJob without containers (one a runtime patch added), a container without an
    image, an env entry with both value and valueFrom, resources (pod_validation.py), a
    negative pod count. The cluster then reports it in an event and the job never runs as
    written."""
    errors = []
    for i, group in enumerate(groups):
        pod = group.template.get("spec") or {}
        if not pod.get("containers"):
            errors.append(
                f'JobSet.jobset.x-k8s.io "{jobset}" is invalid: spec.replicatedJobs[{i}]'
                ".template.spec.template.spec.containers: Required value"
            )
            continue
        job = f'Job.batch "{tj.job_name(jobset, group.type)}" is invalid: '
        # Trainer sets the trainer's Job's parallelism and completions to numNodes.
        counts = ("parallelism", "completions") if group.step == TRAINER else ("parallelism",)
        errors += [
            f"{job}spec.{field}: Invalid value: {group.count}: must be greater than or equal to 0"
            for field in counts
            if group.count < 0
        ]
        errors += [job + e for e in pod_spec_errors(pod, "spec.template.spec")]
    return errors


def injection_targets(runtime: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The torch policy's envInjection targets as (Job, container) pairs."""
    torch = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("torch") or {}
    targets = (torch.get("envInjection") or {}).get("targets") or []
    return [(str(t.get("jobName")), str(c)) for t in targets for c in t.get("containerNames") or []]


def replicated_jobs(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((template.get("spec") or {}).get("replicatedJobs") or [])


def step_of(rjob: Mapping[str, Any]) -> str | None:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(tj.ANCESTOR_LABEL)


def containers(rjob: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
    return list((pod.get("spec") or {}).get(field) or [])
