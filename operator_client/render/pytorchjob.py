"""TrainingJob -> PyTorchJob (kubeflow.org/v1): a pure function, same input, same object.

Everything the runtime needs travels inside the one object (the full spec as JSON in the
trainer container's environment), so `kubectl apply -f` and GitOps tools manage exactly
one resource. docs/OPERATOR_CONTRACT.md explains the Master/Worker and elastic choices.
"""

from __future__ import annotations

from typing import Any

from ..contract import (
    ENDPOINT_ANNOTATION,
    POD_IP_ENV,
    RDZV_CONF,
    REGION_ANNOTATION,
    RUN_ROOT_ANNOTATION,
    RUNTIME_COMMAND,
    SPEC_ENV,
    SPEC_HASH_ANNOTATION,
)
from ..kubeflow import pytorchjob as pj
from ..kubeflow.security import container_security_context, pod_security_context
from ..kubeflow.training_runtime import VOLUME_MOUNTS, pod_volumes
from ..runstore.location import run_root
from ..spec.document import canonical_json, nproc_per_node, spec_document, spec_hash
from ..spec.model import TrainingJob
from .network import network_additions
from .placement import node_selector, tolerations
from .waivers import skip_annotations

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def job_labels(job: TrainingJob) -> dict[str, str]:
    """Labels of the PyTorchJob and of its pods."""
    labels = dict(sorted(job.metadata.labels.items()))
    labels.update(
        {
            "app.kubernetes.io/name": "kctl-train",
            "app.kubernetes.io/instance": job.metadata.name,
            "app.kubernetes.io/managed-by": "kctl-train",
        }
    )
    return labels


def object_metadata(job: TrainingJob) -> dict[str, Any]:
    """The rendered object's metadata: the job's labels (and Kueue's queue label) and
    annotations, with the spec hash and where the run's objects are."""
    spec = job.spec
    labels = job_labels(job)
    if spec.scheduling.queue:
        labels[KUEUE_QUEUE_LABEL] = spec.scheduling.queue
    annotations = dict(sorted(job.metadata.annotations.items()))
    annotations[SPEC_HASH_ANNOTATION] = spec_hash(job)
    if spec.storage is not None:
        meta = job.metadata
        annotations[RUN_ROOT_ANNOTATION] = run_root(spec.storage.uri, meta.namespace, meta.name)
        if spec.storage.endpoint:
            annotations[ENDPOINT_ANNOTATION] = spec.storage.endpoint
        if spec.storage.region:
            annotations[REGION_ANNOTATION] = spec.storage.region
    return {
        "name": job.metadata.name,
        "namespace": job.metadata.namespace,
        "labels": labels,
        "annotations": annotations,
    }


def render_pytorchjob(job: TrainingJob) -> dict[str, Any]:
    """The PyTorchJob manifest for a validated job."""
    spec = job.spec
    replica_specs: dict[str, Any] = {}
    if job.elastic:
        replica_specs[pj.WORKER] = _replica(job, job.max_nodes)
    else:
        # The webhook requires Master.replicas to be explicitly 1.
        replica_specs[pj.MASTER] = _replica(job, 1)
        if job.max_nodes > 1:
            replica_specs[pj.WORKER] = _replica(job, job.max_nodes - 1)

    body: dict[str, Any] = {"nprocPerNode": nproc_per_node(job)}
    if job.elastic:
        body["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            # The operator's default id "none" would collide across jobs.
            "rdzvId": job.metadata.name,
            "minReplicas": job.min_nodes,
            "maxReplicas": job.max_nodes,
            "maxRestarts": spec.fault.max_restarts,
            "rdzvConf": [{"key": k, "value": v} for k, v in RDZV_CONF.items()],
        }
    body["runPolicy"] = _run_policy(job)
    body["pytorchReplicaSpecs"] = replica_specs

    return {
        "apiVersion": pj.API_VERSION,
        "kind": pj.KIND,
        "metadata": object_metadata(job),
        "spec": body,
    }


def _run_policy(job: TrainingJob) -> dict[str, Any]:
    spec = job.spec
    policy: dict[str, Any] = {
        "cleanPodPolicy": spec.cleanup.pods,
        "ttlSecondsAfterFinished": spec.cleanup.ttl_after_finished.seconds,
        "backoffLimit": spec.fault.backoff_limit,
    }
    if spec.fault.active_deadline is not None:
        policy["activeDeadlineSeconds"] = spec.fault.active_deadline.seconds
    if spec.scheduling.gang != "none":
        gang: dict[str, Any] = {"minAvailable": job.min_nodes}
        if spec.scheduling.priority_class_name:
            gang["priorityClass"] = spec.scheduling.priority_class_name
        policy["schedulingPolicy"] = gang
    return policy


def _replica(job: TrainingJob, replicas: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": job.spec.fault.restart_policy,
        "template": {
            "metadata": {"labels": job_labels(job), "annotations": skip_annotations(job)},
            "spec": _pod_spec(job),
        },
    }


def _pod_spec(job: TrainingJob) -> dict[str, Any]:
    spec = job.spec
    pod: dict[str, Any] = {"containers": [_container(job)]}
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    pod["automountServiceAccountToken"] = spec.mount_service_account_token
    # Service links would add env vars for every Service in the namespace to each pod.
    pod["enableServiceLinks"] = False
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    pod.update(placement(job))
    if spec.scheduling.priority_class_name:
        pod["priorityClassName"] = spec.scheduling.priority_class_name
    pod["securityContext"] = pod_security_context()
    pod["terminationGracePeriodSeconds"] = spec.grace_seconds
    pod["volumes"] = pod_volumes(spec.resources.shared_memory.text)
    return pod


def placement(job: TrainingJob) -> dict[str, Any]:
    """Where the pods may run: node selector, tolerations, affinity (each when given)."""
    fields: dict[str, Any] = {}
    selector = node_selector(job)
    if selector:
        fields["nodeSelector"] = selector
    tols = tolerations(job)
    if tols:
        fields["tolerations"] = tols
    if job.spec.node_pool.affinity:
        fields["affinity"] = job.spec.node_pool.affinity
    return fields


def resources(job: TrainingJob) -> dict[str, Any]:
    """The trainer container's requests and limits (GPUs and network devices in both)."""
    spec = job.spec
    net = network_additions(spec.network)
    requests = {"cpu": spec.resources.cpu.text, "memory": spec.resources.memory.text}
    limits = {"memory": spec.resources.memory.text}
    for extra in (
        {spec.resources.gpu_resource: str(spec.resources.gpus)} if spec.resources.gpus else {},
        net.resources,
    ):
        requests.update(extra)
        limits.update(extra)
    return {"requests": requests, "limits": limits}


def _container(job: TrainingJob) -> dict[str, Any]:
    spec = job.spec
    net = network_additions(spec.network)
    return {
        "name": pj.CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": list(RUNTIME_COMMAND),
        "env": trainer_env(job),
        "ports": [{"name": pj.PORT_NAME, "containerPort": pj.DEFAULT_PORT, "protocol": "TCP"}],
        "resources": resources(job),
        "securityContext": container_security_context(net.capabilities),
        "volumeMounts": [dict(m) for m in VOLUME_MOUNTS],
    }


def trainer_env(job: TrainingJob) -> list[dict[str, Any]]:
    """The trainer container's environment: the spec, the pod's IP, the store's settings
    and credentials (from a Secret), the network profile's and the user's variables."""
    network_env = network_additions(job.spec.network).env
    spec = job.spec
    env: list[dict[str, Any]] = [
        {"name": SPEC_ENV, "value": canonical_json(spec_document(job))},
        # Peers reach this node's agent by pod IP: no wait for the Service's DNS record.
        {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    values = {
        # Reliable in-place restarts of gloo/NCCL workers in torch >= 2.4 (docs/RUNTIME_NOTES.md).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        # The root filesystem is read-only; /tmp is an emptyDir.
        "HOME": "/tmp",
        **network_env,
    }
    storage = spec.storage
    if storage is not None:
        if storage.region:
            values["AWS_REGION"] = storage.region
        if storage.endpoint:
            values["AWS_ENDPOINT_URL"] = storage.endpoint
            # S3-compatible servers often reject boto3's default CRC32 checksum headers.
            values["AWS_REQUEST_CHECKSUM_CALCULATION"] = "when_required"
            values["AWS_RESPONSE_CHECKSUM_VALIDATION"] = "when_required"
        if storage.credentials_secret:
            env.extend(
                {
                    "name": key,
                    "valueFrom": {"secretKeyRef": {"name": storage.credentials_secret, "key": key}},
                }
                for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
            )
    values.update(spec.env)
    env.extend({"name": k, "value": v} for k, v in sorted(values.items()))
    return env
