"""TrainingJob -> TrainJob (Kubeflow Trainer v2.3): a pure function, same input, same object.

A TrainJob's pods come from a runtime. The kctl-train ClusterTrainingRuntime (`runtime()`,
shipped in manifests/trainer-v2/) carries what a TrainJob cannot patch: the restart
policy, no service links or API token, the image pull policy, the trainer container's
command and default security. The TrainJob carries the image, environment, node count,
processes and resources in `trainer`, and one runtimePatches entry of its own (manager
kctl-train.io/render) for the pods' labels, placement, security context, grace period and
volumes. docs/TRAINJOB.md explains each choice; the spec rules a TrainJob cannot express
are in spec/checks.py.

    python -m operator_client.render.trainjob manifests/trainer-v2   (writes the runtime)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..contract import RUNTIME_COMMAND
from ..kubeflow import trainjob as tj
from ..spec.document import nproc_per_node
from ..spec.model import FaultPolicy, TrainingJob
from .network import network_additions
from .output import to_yaml
from .pytorchjob import (
    VOLUME_MOUNTS,
    job_labels,
    object_metadata,
    placement,
    pod_volumes,
    resources,
    trainer_env,
)
from .security import container_security_context, pod_security_context
from .waivers import skip_annotations

# The runtime's defaults, which every TrainJob replaces or patches.
RUNTIME_IMAGE = "ghcr.io/kctl-train/trainer:0.1.0"
RUNTIME_SHARED_MEMORY = "1Gi"
# The Job's backoffLimit in the runtime: the spec's default (spec/checks.py refuses any
# other value for a TrainJob).
RUNTIME_BACKOFF_LIMIT: int = FaultPolicy.model_fields["backoff_limit"].default
RUNTIME_FILE = "cluster-training-runtime.yaml"


def render_trainjob(job: TrainingJob) -> dict[str, Any]:
    """The TrainJob manifest for a validated job with spec.operator: trainjob."""
    spec = job.spec
    trainer: dict[str, Any] = {
        "image": spec.image,
        "command": list(RUNTIME_COMMAND),
        "env": trainer_env(job),
        "numNodes": job.max_nodes,
    }
    nproc = nproc_per_node(job)
    # numProcPerNode is an integer; "detect" leaves it out, and the torch plugin then
    # passes `auto` on GPU nodes (checks.py refuses detect where it would not).
    if nproc != "auto":
        trainer["numProcPerNode"] = int(nproc)
    trainer["resourcesPerNode"] = resources(job)
    body: dict[str, Any] = {
        "runtimeRef": {"name": tj.RUNTIME_NAME, "apiGroup": tj.GROUP, "kind": tj.RUNTIME_KIND},
        "trainer": trainer,
        "runtimePatches": [_patch(job)],
    }
    if spec.fault.active_deadline is not None:
        body["activeDeadlineSeconds"] = spec.fault.active_deadline.seconds
    return {
        "apiVersion": tj.API_VERSION,
        "kind": tj.KIND,
        "metadata": object_metadata(job),
        "spec": body,
    }


def _patch(job: TrainingJob) -> dict[str, Any]:
    """kctl-train's runtimePatches entry: the node pods' metadata and PodSpecPatch."""
    spec = job.spec
    pod: dict[str, Any] = {}
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    pod.update(placement(job))
    pod["securityContext"] = pod_security_context()
    pod["terminationGracePeriodSeconds"] = spec.fault.termination_grace_period.seconds
    pod["volumes"] = pod_volumes(spec.resources.shared_memory.text)
    pod["containers"] = [
        {
            "name": tj.CONTAINER_NAME,
            "securityContext": container_security_context(
                network_additions(spec.network).capabilities
            ),
            "volumeMounts": [dict(m) for m in VOLUME_MOUNTS],
        }
    ]
    pod_template = {
        "metadata": {"labels": job_labels(job), "annotations": skip_annotations(job)},
        "spec": pod,
    }
    replicated = {"name": tj.REPLICATED_JOB, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": tj.PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}},
    }


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


def write_runtime(directory: Path) -> Path:
    """Write the runtime's manifest into `directory` (manifests/trainer-v2)."""
    path = directory / RUNTIME_FILE
    header = "# Generated by `python -m operator_client.render.trainjob manifests/trainer-v2`.\n"
    path.write_text(header + to_yaml(runtime()))
    return path


if __name__ == "__main__":
    print(write_runtime(Path(sys.argv[1])))
