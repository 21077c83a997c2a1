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


def job_name(trainjob: str, replicated_job: str = REPLICATED_JOB) -> str:
    """A replicated Job's (only) Job: JobSet names it `<jobset>-<replicatedJob>-<index>`."""
    return f"{trainjob}-{replicated_job}-0"


def pod_hostname(trainjob: str, replicated_job: str, index: int) -> str:
    """A pod's hostname (its Indexed Job's `<job>-<completion index>`); the pod's name
    adds 5 random characters."""
    return f"{job_name(trainjob, replicated_job)}-{index}"


def node_hostname(trainjob: str, index: int) -> str:
    """A trainer pod's hostname."""
    return pod_hostname(trainjob, REPLICATED_JOB, index)
