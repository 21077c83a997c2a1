"""The operators' admission rules, as plain rules: the training-operator's validating
webhook for PyTorchJobs (pkg/webhooks/pytorch/ at v1.9.4, docs/OPERATOR_CONTRACT.md) and
Kubeflow Trainer v2.3's for TrainJobs (docs/TRAINJOB.md). Used to check every rendered
manifest before it leaves the client, and by the local backend, which must refuse what
the cluster would refuse.
"""

from __future__ import annotations

import re
from typing import Any

from . import pytorchjob as pj
from . import trainjob as tj
from .shapes import TRAINJOB_SPEC, shape_errors

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


TRAINJOB_MANAGED_BY = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
_MANAGER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/\S+$")


def _name_errors(manifest: dict[str, Any]) -> list[str]:
    """Both operators: the name is a DNS-1035 label of at most 63 characters."""
    name = (manifest.get("metadata") or {}).get("name") or ""
    if not _DNS_1035.match(name) or len(name) > 63:
        return [f"metadata.name {name!r} is not a DNS-1035 label of at most 63 characters"]
    return []


def admission_errors(manifest: dict[str, Any]) -> list[str]:
    """Why the cluster would refuse this manifest, whichever kind it is."""
    if manifest.get("kind") == tj.KIND:
        return trainjob_errors(manifest)
    return webhook_errors(manifest)


def trainjob_errors(manifest: dict[str, Any]) -> list[str]:
    """Why Trainer v2.3's CRD rules and webhook would reject this TrainJob (the runtime's
    existence is the cluster's to check: `doctor`)."""
    errors = _name_errors(manifest)
    shape = shape_errors(manifest.get("spec"), TRAINJOB_SPEC, "spec")
    if shape:  # what the API server's schema refuses; the rules below assume the shape
        return errors + shape
    spec = manifest["spec"]
    ref = spec["runtimeRef"]
    kind = f"{ref.get('kind', tj.RUNTIME_KIND)}.{ref.get('apiGroup', tj.GROUP)}"
    if kind not in (f"TrainingRuntime.{tj.GROUP}", f"{tj.RUNTIME_KIND}.{tj.GROUP}"):
        errors.append(f"spec.runtimeRef: unsupported runtime: {kind}")
    managed_by = spec.get("managedBy")
    if managed_by is not None and managed_by not in TRAINJOB_MANAGED_BY:
        errors.append(f"spec.managedBy must be one of {', '.join(TRAINJOB_MANAGED_BY)}")
    for patch in spec.get("runtimePatches") or []:
        if not _MANAGER.match(patch.get("manager", "")):
            errors.append(
                f"spec.runtimePatches: manager {patch.get('manager')!r} must be a "
                "domain-prefixed path such as example.com/my-client"
            )
    return errors


def webhook_errors(manifest: dict[str, Any]) -> list[str]:
    """Why the operator's webhook would reject this PyTorchJob; empty when it accepts it.
    Absent fields and explicit nulls are alike, as in Go."""
    errors = _name_errors(manifest)
    spec = manifest.get("spec") or {}
    managed_by = (spec.get("runPolicy") or {}).get("managedBy")
    if managed_by is not None and managed_by not in pj.MANAGED_BY:
        errors.append(f"spec.runPolicy.managedBy must be one of {', '.join(pj.MANAGED_BY)}")
    replicas = spec.get("pytorchReplicaSpecs")
    if replicas is not None:
        # The API server drops null values before the webhook sees the object: `Worker:
        # null` is no Worker at all (a Master-only job).
        replicas = {k: v for k, v in replicas.items() if v is not None}
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if replicas is None or pj.WORKER not in replicas:
            errors.append(
                "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if "
                "elastic policy is used"
            )
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            errors.append(
                "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with "
                "spec.nprocPerNode"
            )
        if elastic.get("rdzvConf") == []:
            # Not the webhook's rule: the operator accepts it, then its reconcile loop
            # panics trimming the joined, empty key=value list. Refused here instead.
            errors.append(
                "spec.elasticPolicy.rdzvConf is an empty list, which crashes the "
                "training-operator's reconcile loop (v1.9.4); leave it out instead"
            )
    if replicas is None:  # `{}` is accepted: the map is empty, not nil
        errors.append("spec.pytorchReplicaSpecs: Required value: must be required")
        return errors
    for rtype, rspec in replicas.items():
        errors += _replica_errors(rtype, rspec)
    return errors


def _replica_errors(rtype: str, rspec: dict[str, Any]) -> list[str]:
    """validatePyTorchReplicaSpecs (v1.9.4 pytorchjob_webhook.go), in its words."""
    where = f"spec.pytorchReplicaSpecs[{rtype}]"
    errors = []
    if rtype not in pj.REPLICA_TYPES:
        errors.append(
            f'{where}: Unsupported value: "{rtype}": supported values: '
            + ", ".join(f'"{t}"' for t in pj.REPLICA_TYPES)
        )
    path = f"{where}.template.spec.containers"
    containers = ((rspec.get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
        errors.append(f"{path}: Required value: must be specified")
    for i, c in enumerate(containers):
        if not c.get("image"):
            errors.append(f"{path}[{i}].image: Required value: must be required")
    if not any(c.get("name") == pj.CONTAINER_NAME for c in containers):
        errors.append(
            f"{path}: Required value: must have at least one container with name "
            f"{pj.CONTAINER_NAME}"
        )
    count = rspec.get("replicas")
    if rtype == pj.MASTER:
        if count is None or count != 1:
            errors.append(f"{where}.replicas: Forbidden: must be 1")
    elif count is not None and count < 1:
        errors.append(f"{where}.replicas: Forbidden: must be at least 1")
    return errors
