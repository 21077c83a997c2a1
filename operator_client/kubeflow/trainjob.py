"""Names and conventions of Kubeflow Trainer v2.3's TrainJob (trainer.kubeflow.org/v1alpha1)
and of the ClusterTrainingRuntime kctl-train renders against (docs/TRAINJOB.md)."""

from __future__ import annotations

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
RUNTIME_KIND = "ClusterTrainingRuntime"
# kctl-train's own runtime (manifests/trainer-v2/): what a TrainJob cannot patch.
RUNTIME_NAME = "kctl-train"
# The replicated Job and container of a torch runtime's trainer (the torch plugin
# writes its variables into this container only).
REPLICATED_JOB = "node"
CONTAINER_NAME = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
# runtimePatches entries are keyed by a domain-prefixed manager; this one is ours.
PATCH_MANAGER = "kctl-train.io/render"
MASTER_PORT = 29500
# JobSet's labels on every pod of a TrainJob.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def pod_hostname(job_name: str, index: int) -> str:
    """A node pod's hostname (its name adds a random suffix): `<job>-node-0-<index>`."""
    return f"{job_name}-{REPLICATED_JOB}-0-{index}"


def master_address(job_name: str) -> str:
    """PET_MASTER_ADDR: node 0's hostname in the JobSet's headless Service `<job>`."""
    return f"{pod_hostname(job_name, 0)}.{job_name}"
