"""What the fidelity corpus compares of a pod, from the real cluster or the local backend.

Kept: what the controllers decide and a job's processes see (names, labels, annotations,
containers' command, args, env as written, ports, mounts, resources, security contexts;
volumes, hostname, subdomain, restart policy, placement fields). Left out, each because it
differs by nature and not by what the controllers do:

- uids and the labels that carry them (`controller-uid`, `batch.kubernetes.io/controller-uid`,
  `jobset.sigs.k8s.io/jobset-uid`): new on every object;
- a TrainJob pod's 5 random characters (`generateName`): its hostname is the name without them;
  likewise those of the ServiceAccount token volume (`kube-api-access-xxxxx`);
- `nodeName` and status: the scheduler's and kubelet's, not the controllers';
- what the API server defaults on every pod whatever made it (`dnsPolicy`,
  `schedulerName`, `priority`, `preemptionPolicy`, the deprecated `serviceAccount` alias,
  `serviceAccountName: default`, `terminationMessagePath`/`Policy`, and the NoExecute
  not-ready/unreachable tolerations of DefaultTolerationSeconds);
- the PyTorchJob worker's `init-pytorch` container: each installation configures it
  (--pytorch-init-container-template-file), and a local run does not start it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

UID_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "jobset.sigs.k8s.io/jobset-uid",
)
CONTAINER_FIELDS = (
    "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom",
    "ports", "volumeMounts", "resources", "securityContext",
)  # fmt: skip
POD_FIELDS = (
    "hostname", "subdomain", "restartPolicy", "securityContext", "volumes", "nodeSelector",
    "affinity", "tolerations", "priorityClassName", "serviceAccountName", "imagePullSecrets",
    "automountServiceAccountToken", "enableServiceLinks", "terminationGracePeriodSeconds",
    "hostNetwork", "hostIPC", "hostPID", "shareProcessNamespace",
)  # fmt: skip
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
INIT_PYTORCH = "init-pytorch"


def project(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The compared fields of one pod."""
    meta, spec = pod["metadata"], pod["spec"]
    name = meta["name"]
    if meta.get("generateName"):
        name = re.sub(r"-[a-z0-9]{5}$", "", name)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in UID_LABELS}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in UID_LABELS}
    kept: dict[str, Any] = {k: spec[k] for k in POD_FIELDS if spec.get(k) not in (None, [], {})}
    if kept.get("serviceAccountName") == "default":
        del kept["serviceAccountName"]
    tolerations = [
        t for t in kept.get("tolerations", []) if t.get("key") not in DEFAULT_TOLERATIONS
    ]
    if tolerations:
        kept["tolerations"] = tolerations
    else:
        kept.pop("tolerations", None)
    if "volumes" in kept:
        kept["volumes"] = [{**v, "name": _token(v["name"])} for v in kept["volumes"]]
    kept["containers"] = [_container(c) for c in spec.get("containers") or []]
    init = [_container(c) for c in spec.get("initContainers") or [] if c["name"] != INIT_PYTORCH]
    if init:
        kept["initContainers"] = init
    return {
        "name": name,
        "labels": labels,
        "annotations": annotations,
        "spec": kept,
    }


def _token(name: str) -> str:
    return re.sub(r"^kube-api-access-[a-z0-9]{5}$", "kube-api-access", name)


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: container[k] for k in CONTAINER_FIELDS if container.get(k) not in (None, [], {})}
    if "volumeMounts" in kept:
        kept["volumeMounts"] = [{**m, "name": _token(m["name"])} for m in kept["volumeMounts"]]
    return kept


def refusal(message: str) -> str:
    """A pod refusal without the pod's name: the operator may report the first pod it could
    not create or every one, as its timing goes, and the words are the same for each."""
    return re.sub(r'pods "[^"]*" is forbidden', 'pods "<pod>" is forbidden', message)
