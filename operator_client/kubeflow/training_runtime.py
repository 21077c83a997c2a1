"""kctl-train's ClusterTrainingRuntime (Kubeflow Trainer v2.3), as a cluster has it
installed (manifests/trainer-v2/, written by `python -m operator_client.render.trainjob`)
and as the local backend has it built in: what a TrainJob's pods are before the TrainJob
patches them (docs/TRAINJOB.md).

It carries what a TrainJob cannot patch: the restart policy, no service links or API
token, the image pull policy, the trainer container's command and default security.
"""

from __future__ import annotations

from typing import Any

from ..contract import DEFAULT_BACKOFF_LIMIT, RUNTIME_COMMAND
from . import trainjob as tj
from .security import container_security_context, pod_security_context

# The runtime's defaults, which every TrainJob replaces or patches.
RUNTIME_IMAGE = "ghcr.io/kctl-train/trainer:0.1.0"
RUNTIME_SHARED_MEMORY = "1Gi"
# The Job's backoffLimit in the runtime: the spec's default (spec/checks.py refuses any
# other value for a TrainJob).
RUNTIME_BACKOFF_LIMIT = DEFAULT_BACKOFF_LIMIT


def pod_volumes(shared_memory: str) -> list[dict[str, Any]]:
    """/dev/shm in memory, sized; /tmp (HOME, caches) on a read-only root."""
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shared_memory}},
        {"name": "tmp", "emptyDir": {}},
    ]


VOLUME_MOUNTS = ({"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"})


def runtime() -> dict[str, Any]:
    """The kctl-train ClusterTrainingRuntime: the torch plugin, one replicated Job `node`
    of Indexed pods that restart OnFailure, without service links or an API token, the
    trainer container running kctl-train-runtime under the restricted security contexts."""
    container = {
        "name": tj.CONTAINER_NAME,
        "image": RUNTIME_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": list(RUNTIME_COMMAND),
        "securityContext": container_security_context(),
        "volumeMounts": [dict(m) for m in VOLUME_MOUNTS],
    }
    pod = {
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "volumes": pod_volumes(RUNTIME_SHARED_MEMORY),
        "containers": [container],
    }
    node = {
        "name": tj.REPLICATED_JOB,
        "template": {
            "metadata": {"labels": {tj.ANCESTOR_LABEL: "trainer"}},
            "spec": {"backoffLimit": RUNTIME_BACKOFF_LIMIT, "template": {"spec": pod}},
        },
    }
    return {
        "apiVersion": tj.API_VERSION,
        "kind": tj.RUNTIME_KIND,
        "metadata": {
            "name": tj.RUNTIME_NAME,
            "labels": {
                "trainer.kubeflow.org/framework": "torch",
                "app.kubernetes.io/name": "kctl-train",
                "app.kubernetes.io/managed-by": "kctl-train",
            },
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [node]}},
        },
    }
