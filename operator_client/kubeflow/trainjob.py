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


def node_job(trainjob: str) -> str:
    """The trainer's Job: JobSet names it `<jobset>-<replicatedJob>-<index>`."""
    return f"{trainjob}-{REPLICATED_JOB}-0"


def node_hostname(trainjob: str, index: int) -> str:
    """A node pod's hostname (its Indexed Job's `<job>-<completion index>`); the pod's
    name adds 5 random characters."""
    return f"{node_job(trainjob)}-{index}"
