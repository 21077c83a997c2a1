"""The training-operator's validating webhook for PyTorchJobs, as plain rules.

Read from pkg/webhooks/pytorch/ at v1.9.4 (docs/OPERATOR_CONTRACT.md). Used to check
every rendered manifest before it leaves the client, and by the local backend, which
must refuse what the cluster would refuse.
"""

from __future__ import annotations

import re
from typing import Any

from . import pytorchjob as pj

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def webhook_errors(manifest: dict[str, Any]) -> list[str]:
    """Why the operator's webhook would reject this PyTorchJob; empty when it accepts it.
    Absent fields and explicit nulls are alike, as in Go."""
    errors: list[str] = []
    name = (manifest.get("metadata") or {}).get("name") or ""
    if not _DNS_1035.match(name) or len(name) > 63:
        errors.append(f"metadata.name {name!r} is not a DNS-1035 label of at most 63 characters")
    spec = manifest.get("spec") or {}
    managed_by = (spec.get("runPolicy") or {}).get("managedBy")
    if managed_by is not None and managed_by not in pj.MANAGED_BY:
        errors.append(f"spec.runPolicy.managedBy must be one of {', '.join(pj.MANAGED_BY)}")
    replicas = spec.get("pytorchReplicaSpecs")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        # A Worker key with a null value counts as configured here (Go's `_, ok :=`).
        if replicas is None or pj.WORKER not in replicas:
            errors.append("spec.elasticPolicy needs a Worker replica spec")
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            errors.append("spec.elasticPolicy.nProcPerNode and spec.nprocPerNode are both set")
    if replicas is None:  # `{}` is accepted: the map is empty, not nil
        errors.append("spec.pytorchReplicaSpecs is required")
        return errors
    for rtype, rspec in replicas.items():
        errors += _replica_errors(rtype, rspec)
    return errors


def _replica_errors(rtype: str, rspec: dict[str, Any] | None) -> list[str]:
    where = f"spec.pytorchReplicaSpecs.{rtype}"
    errors = []
    if rtype not in pj.REPLICA_TYPES:
        errors.append(f"{where}: replica type must be one of {', '.join(pj.REPLICA_TYPES)}")
    if rspec is None:
        # The operator's webhook reports the missing containers, then dereferences the nil
        # spec and fails the request; either way the job is refused.
        return [*errors, f"{where}: the replica spec is null: it needs a pod template"]
    containers = ((rspec.get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
        errors.append(f"{where}.template.spec.containers must be specified")
    for c in containers:
        if not c.get("image"):
            errors.append(f"{where}: container {c.get('name')!r} has no image")
    if not any(c.get("name") == pj.CONTAINER_NAME for c in containers):
        errors.append(f"{where}: no container named {pj.CONTAINER_NAME!r}")
    count = rspec.get("replicas")
    if rtype == pj.MASTER:
        if count is None or count != 1:
            errors.append(f"{where}.replicas must be set to 1")
    elif count is not None and count < 1:
        errors.append(f"{where}.replicas must be at least 1")
    return errors
