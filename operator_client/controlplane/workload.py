"""The pods a job asks for, whichever operator's object it is: a PyTorchJob's replica
specs as written, a TrainJob's pods as Trainer v2.3 and JobSet v0.12 build them from its
runtime (trainjob_pods.py, docs/TRAINJOB.md). Pure; the local backend runs these pods with
the env each operator adds, and the lifecycle rules (lifecycle.py) read their policies here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kubeflow import pytorchjob as pj
from ..kubeflow import trainjob as tj
from ..kubeflow.training_runtime import runtime
from .groups import Group, WorkloadError
from .operator_env import operator_env
from .pod_validation import pod_spec_errors
from .trainjob_pods import JobSetNetwork, build, torch_env

__all__ = ["Group", "Workload", "WorkloadError", "workload_of"]


# managedBy that hands a job to Kueue's MultiKueue (both operators accept it).
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True)
class Workload:
    manifest: Mapping[str, Any]
    groups: tuple[Group, ...]  # in start order
    network: JobSetNetwork | None = None  # a TrainJob's JobSet network

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
    def main(self) -> Group:
        """The group whose backoff limit decides the job: a TrainJob's trainer Job, a
        PyTorchJob's first replica type (runPolicy's limit is the job's)."""
        return next((g for g in self.groups if g.step == "trainer"), self.groups[0])

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
        named by their hostname, `<job>-<replicatedJob>-0-<i>` (a cluster adds 5 random
        characters), initializers first."""
        return [(self.pod_name(g.type, i), g.type, i) for g in self.groups for i in range(g.count)]

    def pod_name(self, replica_type: str, index: int) -> str:
        if self.trainjob:
            return tj.pod_hostname(self.name, replica_type, index)
        return pj.pod_name(self.name, replica_type, index)

    def dns_names(self, pod: str) -> tuple[str, ...]:
        """The names that resolve to a pod in its namespace: a PyTorchJob's per-pod Service;
        a TrainJob pod's hostname, alone and under the JobSet's headless Service (none
        where the runtime sets enableDNSHostnames: false)."""
        if self.network is None:
            return (pod,)
        return (pod, f"{pod}.{self.network.subdomain}") if self.network.dns_hostnames else ()

    def pod_fields(self, replica_type: str, index: int) -> dict[str, str]:
        """The downward API's fields of one pod by fieldPath: its name, namespace, labels
        and annotations (the template's, and those JobSet and the Job controller add)."""
        meta = self.group(replica_type).template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        if self.trainjob:
            jobset = {
                "jobset-name": self.name,
                "replicatedjob-name": replica_type,
                "job-index": "0",
            }
            labels |= {f"jobset.sigs.k8s.io/{k}": v for k, v in jobset.items()}
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
        return {
            "metadata.name": self.pod_name(replica_type, index),
            "metadata.namespace": self.namespace,
            **{f"metadata.labels['{k}']": str(v) for k, v in labels.items()},
            **{f"metadata.annotations['{k}']": str(v) for k, v in annotations.items()},
        }

    def pod_spec(self, replica_type: str) -> Mapping[str, Any]:
        return self.group(replica_type).template["spec"]  # type: ignore[no-any-return]

    def container(self, replica_type: str) -> dict[str, Any]:
        """The container a local run starts for one replica type (the trainer's, an
        initializer's), before the operator's env."""
        name = self.group(replica_type).container
        for container in self.pod_spec(replica_type).get("containers", []):
            if container["name"] == name:
                return dict(container)
        raise WorkloadError(f"{replica_type}: no container named {name!r}")

    def operator_env(self, replica_type: str, index: int) -> dict[str, str]:
        """What the operator adds to the trainer container's env of one pod."""
        if not self.trainjob:
            return operator_env(self.manifest, replica_type, index)
        group = self.group(replica_type)
        # Kubernetes sets the completion index of every Indexed Job's pod (JobSet's Jobs
        # are Indexed), with or without a torch policy.
        env = {"JOB_COMPLETION_INDEX": str(index)}
        if group.container in group.torch_targets:
            env |= torch_env(self.name, self.main, index)
        return env


def workload_of(
    manifest: Mapping[str, Any], runtimes: Mapping[str, Mapping[str, Any]] | None = None
) -> Workload:
    """The pods of a PyTorchJob or TrainJob; `runtimes`: the Trainer v2 runtimes a TrainJob
    may name, by name, beside kctl-train's own (built in, unless one of them is named so)."""
    kind = manifest.get("kind")
    spec = manifest.get("spec") or {}
    if spec.get("suspend") is True or (spec.get("runPolicy") or {}).get("suspend") is True:
        # The controllers make no pods until something (Kueue, a person) resumes the job.
        raise WorkloadError(
            "suspend: true: the controllers make no pods until the job is resumed (by Kueue "
            "or a person), which nothing does locally; drop suspend to run it here"
        )
    managed = spec.get("managedBy") or (spec.get("runPolicy") or {}).get("managedBy")
    if managed == MULTIKUEUE:
        field = "spec.managedBy" if kind == tj.KIND else "spec.runPolicy.managedBy"
        raise WorkloadError(
            f"{field} {MULTIKUEUE}: Kueue's MultiKueue runs it on a worker cluster and the "
            "controllers here make no pods, which a local run does not reproduce; drop "
            "managedBy to run it here"
        )
    if kind == pj.KIND:
        workload = Workload(manifest, _pytorchjob_groups(manifest))
        refused = [
            f'Pod "{workload.pod_name(g.type, 0)}" is invalid: {e}'
            for g in workload.groups
            for e in pod_spec_errors(g.template.get("spec") or {})
        ]
        if refused:
            raise WorkloadError(
                "the API server would refuse the pods the operator makes of it, so it would "
                "never run as written: " + "; ".join(refused)
            )
        return workload
    if kind == tj.KIND:
        runtimes = dict(runtimes or {})
        if tj.RUNTIME_NAME not in runtimes and _names(manifest) == tj.RUNTIME_NAME:
            runtimes[tj.RUNTIME_NAME] = runtime()
        groups, network = build(manifest, runtime_for(manifest, runtimes))
        return Workload(manifest, groups, network)
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
            pj.CONTAINER_NAME,
        )
        for rtype in pj.REPLICA_TYPES
        if specs.get(rtype) is not None  # the API server drops a null replica spec
    )


def _names(manifest: Mapping[str, Any]) -> Any:
    return (manifest.get("spec") or {}).get("runtimeRef", {}).get("name")


def runtime_for(
    manifest: Mapping[str, Any], runtimes: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any]:
    """The runtime a TrainJob names, of those given (by name); WorkloadError naming
    them when it is not one of them."""
    ref = manifest["spec"]["runtimeRef"]
    kind = ref.get("kind", tj.RUNTIME_KIND)
    found = runtimes.get(ref["name"])
    if found is None or found.get("kind", tj.RUNTIME_KIND) != kind:
        known = [f"{r.get('kind')}/{n}" for n, r in sorted(runtimes.items())]
        known.append(f"{tj.RUNTIME_KIND}/{tj.RUNTIME_NAME}")
        raise WorkloadError(
            f"spec.runtimeRef: {kind}/{ref['name']} is not here (this backend has "
            f"{', '.join(sorted(set(known)))}); give its file with --runtime FILE "
            "(Kubeflow's shipped runtimes run as they are)"
        )
    return found
