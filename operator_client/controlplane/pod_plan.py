"""One plan of a job's pods, built once from its manifest: every pod the controllers would
make of it, in start order, with what each runs (its container, the pod spec, the downward
API's values, the env its operator adds, the names that resolve to it); which pod groups
admission or the kubelet refuse at a Pod Security level; and the Pod objects themselves.

The local backend's preflight, its supervisor and `apply --dry-run=server -o yaml` read
this plan, and the fidelity tests compare its Pod objects with the real controllers'; none
of them asks the rules again pod by pod (bench/call_path.py counts how often a backend
does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kubeflow.pod_objects import PodObjects
from . import pod_security as pss
from .pod_env import PodEnvError, resolve_env
from .pod_manifests import pod_manifests
from .workload import Group, Workload, workload_of


@dataclass(frozen=True)
class PodPlan:
    """One pod: plain values, so that a backend reads them without calling back."""

    name: str
    type: str  # its replica type (a PyTorchJob's Master/Worker, a TrainJob's replicated Job)
    index: int
    spec: Mapping[str, Any]  # the pod spec of its group's template
    container: Mapping[str, Any]  # the container a local run starts, before the operator's env
    fields: Mapping[str, str]  # the downward API's values by fieldPath
    operator_env: Mapping[str, str]  # what the operator adds, as on a cluster
    dns_names: tuple[str, ...]  # the names that resolve to it in its namespace


@dataclass(frozen=True)
class JobPlan:
    """Every pod of a job, and what admission says of them."""

    workload: Workload
    namespace: str
    trainjob: bool
    main: str  # the replica type whose backoff limit decides the job (Workload.main)
    groups: tuple[Group, ...]  # in start order
    count: int  # how many pods the job has
    pods: tuple[PodPlan, ...]  # in start order, one group after another (none: over max_pods)
    hosts: frozenset[str]  # every name that resolves to one of the job's pods
    level: str
    # By replica type, for the groups refused (the first pod of each names it): the API
    # server's Pod Security refusal at `level`; the kubelet's CreateContainerConfigError
    # for a container that must run as non-root but would run as root.
    refused: Mapping[str, str]
    kubelet_refused: Mapping[str, str]
    objects: tuple[dict[str, Any], ...]  # the Pod objects, as the API server would hold them

    def pod(self, name: str) -> PodPlan:
        """The pod named `name` (KeyError naming the job's pods when none is)."""
        for pod in self.pods:
            if pod.name == name:
                return pod
        raise KeyError(f"no pod {name!r} (pods: {', '.join(p.name for p in self.pods)})")


def plan_of(
    manifest: Mapping[str, Any] | Workload,
    runtimes: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    level: str = pss.BASELINE,
    default_uid: int = 0,
    max_pods: int | None = None,
) -> JobPlan:
    """The plan of a PyTorchJob's or TrainJob's pods (WorkloadError where there are none
    to make); `runtimes` the Trainer v2 runtimes a TrainJob may name, `level` the Pod
    Security level its namespace enforces, `default_uid` the user a container without
    runAsUser runs as (the image's). A job of more than `max_pods` pods gets a plan with
    its count and no pods: a backend that cannot run it says so without making 2**31 of
    them."""
    workload = manifest if isinstance(manifest, Workload) else workload_of(manifest, runtimes)
    if max_pods is not None and workload.count > max_pods:
        return _plan(workload, (), level, {}, {}, ())
    pods = tuple(
        PodPlan(
            name=name,
            type=replica_type,
            index=index,
            spec=workload.pod_spec(replica_type),
            container=workload.container(replica_type),
            fields=workload.pod_fields(replica_type, index),
            operator_env=workload.operator_env(replica_type, index),
            dns_names=workload.dns_names(name),
        )
        for name, replica_type, index in workload.pods()
    )
    kubelet = {}
    for group in workload.groups:
        pod = workload.pod_name(group.type, 0)
        spec = workload.pod_spec(group.type)
        if found := pss.kubelet_refusal(pod, workload.namespace, spec, default_uid):
            kubelet[group.type] = f"{pod}: CreateContainerConfigError: {found}"
    refused = pss.group_refusals(workload, level)
    return _plan(workload, pods, level, refused, kubelet, tuple(pod_manifests(workload)))


def _plan(
    workload: Workload,
    pods: tuple[PodPlan, ...],
    level: str,
    refused: Mapping[str, str],
    kubelet_refused: Mapping[str, str],
    objects: tuple[dict[str, Any], ...],
) -> JobPlan:
    """The plan of `workload` with its pods (none: over max_pods) and what admission says."""
    return JobPlan(
        workload=workload,
        namespace=workload.namespace,
        trainjob=workload.trainjob,
        main=workload.main.type,
        groups=workload.groups,
        count=workload.count,
        pods=pods,
        hosts=frozenset(n for pod in pods for n in pod.dns_names),
        level=level,
        refused=refused,
        kubelet_refused=kubelet_refused,
        objects=objects,
    )


def unresolved(plan: JobPlan, objects: Mapping[str, PodObjects], pod_ip: str) -> dict[str, str]:
    """By pod name, why the kubelet could not resolve a pod's env (CreateContainerConfigError,
    a reference a local run does not resolve) with `objects`, each pod's Secrets and
    ConfigMaps; pods not in `objects` are not asked."""
    found = {}
    for pod in plan.pods:
        if pod.name not in objects:
            continue
        try:
            resolve_env(pod.container, pod_ip=pod_ip, objects=objects[pod.name], fields=pod.fields)
        except PodEnvError as exc:
            found[pod.name] = str(exc)
    return found
