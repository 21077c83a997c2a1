"""The Pods a job's controllers make, as Pod objects: what the API server would hold once
the training-operator (PyTorchJob), or Trainer, JobSet and the Job controller (TrainJob),
and admission made them. Env is as written (a valueFrom stays one); names that a cluster
generates (a TrainJob pod's 5 random characters, uids) are left out.

Pure: `apply --local --dry-run=server -o yaml` prints these, and tests/fidelity compares
them with the pods recorded from the real controllers (docs/LOCAL_PODS.md).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from ..kubeflow import pytorchjob as pj
from .groups import Group
from .trainjob_pods import torch_env
from .workload import Workload

JOBSET = "jobset.sigs.k8s.io"


def pod_manifests(workload: Workload) -> list[dict[str, Any]]:
    """Every pod of the workload as a Pod object, in start order."""
    return [
        _pod(workload, workload.group(replica_type), index)
        for _, replica_type, index in workload.pods()
    ]


def _pod(workload: Workload, group: Group, index: int) -> dict[str, Any]:
    template = copy.deepcopy(dict(group.template))
    meta = template.get("metadata") or {}
    spec = dict(template.get("spec") or {})
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    name = workload.pod_name(group.type, index)
    if workload.trainjob:
        added = _jobset_labels(workload, group)
        labels |= added | _job_labels(workload, group, index)
        annotations |= added | {"batch.kubernetes.io/job-completion-index": str(index)}
        annotations.pop(f"{JOBSET}/priority")
        if workload.network is not None and workload.network.dns_hostnames:
            spec["hostname"] = name
        spec["restartPolicy"] = group.restart_policy
    else:
        labels |= _operator_labels(workload, group, index)
        # setRestartPolicy: the replica's policy replaces the template's; ExitCode, which
        # a pod cannot have, is Never (the operator decides on the exit code itself).
        policy = group.restart_policy
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    spec["containers"] = [
        _container(workload, group, index, c) for c in spec.get("containers") or []
    ]
    if spec.get("initContainers"):
        spec["initContainers"] = [
            _container(workload, group, index, c) if workload.trainjob else _defaults(c)
            for c in spec["initContainers"]
        ]
    _admitted(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": workload.namespace,
            "labels": labels,
            **({"annotations": annotations} if annotations else {}),
        },
        "spec": spec,
    }


def _container(
    workload: Workload, group: Group, index: int, container: Mapping[str, Any]
) -> dict[str, Any]:
    out = _defaults(container)
    env = list(out.get("env") or [])
    if workload.trainjob:
        # Trainer upserts its variables by name (apply.UpsertEnvVars): one the container
        # has is replaced where it stands; the Job controller adds its own likewise, to
        # every container and init container of an Indexed Job's pod.
        for item in _trainjob_env(workload, group, index, container["name"]):
            at = next((i for i, e in enumerate(env) if e["name"] == item["name"]), None)
            if at is None:
                env.append(item)
            else:
                env[at] = item
    else:
        # setPodEnv appends to every container, whatever it already has (the kubelet
        # then takes the last of two entries of one name).
        env += [
            {"name": k, "value": v} for k, v in workload.operator_env(group.type, index).items()
        ]
        ports = out.get("ports") or []
        if container["name"] == pj.CONTAINER_NAME and not any(
            p.get("name") == pj.PORT_NAME for p in ports
        ):
            port = {"name": pj.PORT_NAME, "containerPort": pj.DEFAULT_PORT, "protocol": "TCP"}
            out["ports"] = [*ports, port]
    if env:
        out["env"] = env
    return out


def _trainjob_env(
    workload: Workload, group: Group, index: int, container: str
) -> list[dict[str, Any]]:
    """The torch plugin's variables where it writes them (PET_NODE_RANK read from the
    completion index), then the one the Job controller adds to every container."""
    env: list[dict[str, Any]] = []
    if container in group.torch_targets:
        for key, value in torch_env(workload.name, workload.main, index).items():
            if key == "PET_NODE_RANK":
                env.append(
                    _field(key, "metadata.annotations['batch.kubernetes.io/job-completion-index']")
                )
            else:
                env.append({"name": key, "value": value})
    env.append(
        _field(
            "JOB_COMPLETION_INDEX", "metadata.labels['batch.kubernetes.io/job-completion-index']"
        )
    )
    return env


# The ServiceAccount admission plugin's projected token volume (its name ends in 5 random
# characters on a cluster) and where it mounts it (plugin/pkg/admission/serviceaccount).
TOKEN_VOLUME = "kube-api-access"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SOURCES = [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
    {
        "downwardAPI": {
            "items": [
                {
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    "path": "namespace",
                }
            ]
        }
    },
]


def _admitted(spec: dict[str, Any]) -> None:
    """What admission and the API server's defaults add to every pod whatever made it, of
    the fields a pod's processes see: service links, the grace period, and (unless the pod
    opts out) the ServiceAccount's token volume in every container."""
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("terminationGracePeriodSeconds", 30)
    if spec.get("volumes"):
        spec["volumes"] = [_volume_defaults(v) for v in spec["volumes"]]
    if spec.get("automountServiceAccountToken") is False:
        return
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {
            "name": TOKEN_VOLUME,
            "projected": {"defaultMode": 420, "sources": copy.deepcopy(TOKEN_SOURCES)},
        },
    ]
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            mounts = container.get("volumeMounts") or []
            if not any(m.get("mountPath") == TOKEN_PATH for m in mounts):
                mount = {"mountPath": TOKEN_PATH, "name": TOKEN_VOLUME, "readOnly": True}
                container["volumeMounts"] = [*mounts, mount]


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _defaults(container: Mapping[str, Any]) -> dict[str, Any]:
    """The API server's defaults for the fields a pod's behaviour depends on."""
    out = copy.deepcopy(dict(container))
    for item in out.get("env") or []:
        source = item.get("valueFrom") or {}
        if source.get("fieldRef") is not None:
            source["fieldRef"].setdefault("apiVersion", "v1")
        if source.get("resourceFieldRef") is not None:
            source["resourceFieldRef"].setdefault("divisor", "0")
    image = str(out.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
    out.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    if out.get("ports"):
        out["ports"] = [{**p, "protocol": p.get("protocol", "TCP")} for p in out["ports"]]
    resources = out.get("resources") or {}
    if resources.get("limits"):
        # A limit without a request gets the limit as its request (SetDefaults_Pod).
        resources = {
            **resources,
            "requests": {**resources["limits"], **(resources.get("requests") or {})},
        }
    # A quantity is stored as text (a YAML number becomes its string); an empty list of
    # them is not stored at all.
    resources = {
        kind: {k: str(v) for k, v in values.items()} if isinstance(values, Mapping) else values
        for kind, values in resources.items()
        if values
    }
    if resources:
        out["resources"] = resources
    else:
        out.pop("resources", None)
    return out


# The volume sources whose files get mode 0644 (420) unless the pod says (SetDefaults_*).
MODE_DEFAULTED = ("configMap", "secret", "downwardAPI", "projected")


def _volume_defaults(volume: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(volume))
    for kind in MODE_DEFAULTED:
        if isinstance(out.get(kind), dict):
            out[kind].setdefault("defaultMode", 420)
    return out


def _operator_labels(workload: Workload, group: Group, index: int) -> dict[str, str]:
    """The training-operator's pod labels (v1.9.4 GenLabels, plus the master's role)."""
    labels = {
        "training.kubeflow.org/job-name": workload.name,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-index": str(index),
        "training.kubeflow.org/replica-type": group.type.lower(),
    }
    # IsMasterRole: the Master, or Worker 0 of a job without one.
    has_master = any(g.type == pj.MASTER for g in workload.groups)
    if group.type == pj.MASTER or (not has_master and group.type == pj.WORKER and index == 0):
        labels["training.kubeflow.org/job-role"] = "master"
    return labels


def _job_name(workload: Workload, group: Group) -> str:
    return f"{workload.name}-{group.type}-0"


def _jobset_labels(workload: Workload, group: Group) -> dict[str, str]:
    """JobSet's labels (and annotations) on each Job's pods: one Job per replicated Job."""
    job = _job_name(workload, group)
    position = [g.type for g in workload.groups].index(group.type)
    return {
        f"{JOBSET}/global-replicas": str(len(workload.groups)),
        f"{JOBSET}/group-name": "default",
        f"{JOBSET}/group-replicas": str(len(workload.groups)),
        f"{JOBSET}/job-global-index": str(position),
        f"{JOBSET}/job-group-index": str(position),
        f"{JOBSET}/job-index": "0",
        f"{JOBSET}/job-key": hashlib.sha1(  # JobSet's key (jobHashKey), not a secret
            f"{workload.namespace}/{job}".encode()
        ).hexdigest(),
        f"{JOBSET}/jobset-name": workload.name,
        f"{JOBSET}/priority": "0",
        f"{JOBSET}/replicatedjob-name": group.type,
        f"{JOBSET}/replicatedjob-replicas": "1",
        f"{JOBSET}/restart-attempt": "0",
    }


def _job_labels(workload: Workload, group: Group, index: int) -> dict[str, str]:
    """The Job controller's labels on an Indexed Job's pods (uids left out)."""
    job = _job_name(workload, group)
    return {
        "batch.kubernetes.io/job-completion-index": str(index),
        "batch.kubernetes.io/job-name": job,
        "job-name": job,
    }
