"""Kubernetes' strategic merge patch, for the pod template fields a TrainJob's runtime
patches touch: Trainer v2.3 applies each runtimePatches entry, and `trainer`'s env and
resources, this way onto the runtime's JobSet template (docs/TRAINJOB.md).

Maps merge key by key; lists that core/v1 declares with a patch merge key (containers,
volumes, env, volumeMounts, ports, schedulingGates, ...) merge item by item on that key;
any other list (tolerations, command) is replaced. A null means "not set": the API server
drops nulls from a TrainJob before Trainer reads it, so a null neither deletes nor
replaces (apimachinery's strategicpatch would delete, but never sees one). Where Trainer
upserts env (`trainer.env`, the initializers', apply.UpsertEnvVars), an entry replaced by
name is replaced whole, so it never ends up with both `value` and `valueFrom`; a runtime
patch's env entry merges field by field (tests/fidelity: the real Trainer's JobSet then
has both, and the API server refuses the Job). Directives ($patch,
$retainKeys) are not supported: nothing kctl-train renders uses them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The patchMergeKey of each list field of a PodTemplateSpec (and a JobSet's replicatedJobs)
# that kctl-train's runtime or patches carry.
MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "schedulingGates": "name",
}
# Lists whose items an upsert replaces whole when their keys match (the module docstring).
UPSERTED = frozenset({"env"})


def merge(base: Any, patch: Any, field: str = "", whole: frozenset[str] = UPSERTED) -> Any:
    """`patch` applied to `base` (neither is changed); the items of the lists named in
    `whole` are replaced whole when their keys match, the others merged."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in patch.items():
            if value is None:
                continue
            if key in out:
                out[key] = merge(out[key], value, key, whole)
            else:
                out[key] = _without_nulls(value)
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        merged = [copy.deepcopy(item) for item in base]
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, Mapping)}
        for item in patch:
            at = index.get(item.get(key)) if isinstance(item, Mapping) else None
            if at is None:
                merged.append(_without_nulls(item))
            elif field in whole:
                merged[at] = _without_nulls(item)
            else:
                merged[at] = merge(merged[at], item, whole=whole)
        return merged
    return _without_nulls(patch)


def _without_nulls(value: Any) -> Any:
    """A copy of `value` without null map entries (as the API server stores it)."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return copy.deepcopy(value)
