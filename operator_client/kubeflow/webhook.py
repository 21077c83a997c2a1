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
    """Why the operator's webhook would reject this PyTorchJob; empty when it accepts it."""
    errors: list[str] = []
    name = manifest.get("metadata", {}).get("name", "")
    if not _DNS_1035.match(name) or len(name) > 63:
        errors.append(f"metadata.name {name!r} is not a DNS-1035 label of at most 63 characters")
    spec = manifest.get("spec", {})
    replicas: dict[str, Any] = spec.get("pytorchReplicaSpecs") or {}
    if not replicas:
        errors.append("spec.pytorchReplicaSpecs is empty")
    for rtype, rspec in replicas.items():
        where = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in pj.REPLICA_TYPES:
            errors.append(f"{where}: replica type must be one of {', '.join(pj.REPLICA_TYPES)}")
        containers = rspec.get("template", {}).get("spec", {}).get("containers") or []
        if not any(c.get("name") == pj.CONTAINER_NAME for c in containers):
            errors.append(f"{where}: no container named {pj.CONTAINER_NAME!r}")
        for c in containers:
            if not c.get("image"):
                errors.append(f"{where}: container {c.get('name')!r} has no image")
        if rtype == pj.MASTER and rspec.get("replicas") != 1:
            errors.append(f"{where}.replicas must be set to 1")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if pj.WORKER not in replicas:
            errors.append("spec.elasticPolicy needs a Worker replica spec")
        if "nProcPerNode" in elastic and spec.get("nprocPerNode") is not None:
            errors.append("spec.elasticPolicy.nProcPerNode and spec.nprocPerNode are both set")
    managed_by = spec.get("runPolicy", {}).get("managedBy")
    if managed_by is not None and managed_by not in pj.MANAGED_BY:
        errors.append(f"spec.runPolicy.managedBy must be one of {', '.join(pj.MANAGED_BY)}")
    return errors
