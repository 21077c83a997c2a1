"""Names and conventions of the PyTorchJob resource (kubeflow.org/v1)."""

from __future__ import annotations

GROUP, VERSION = "kubeflow.org", "v1"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = "pytorchjobs.kubeflow.org"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CONTAINER_NAME = "pytorch"
PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456
# spec.nprocPerNode when it is not given (the operator's DefaultNprocPerNode).
DEFAULT_NPROC_PER_NODE = "auto"
INIT_CONTAINER_NAME = "init-pytorch"
# Labels the operator puts on replica pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
MASTER = "Master"
WORKER = "Worker"
REPLICA_TYPES = (MASTER, WORKER)
# runPolicy.managedBy values the webhook accepts.
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")


def pod_name(job_name: str, replica_type: str, index: int) -> str:
    """Name of a replica's pod and headless Service, e.g. ``demo-worker-3``."""
    return f"{job_name}-{replica_type.lower()}-{index}"
