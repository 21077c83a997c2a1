"""Kubernetes' strategic merge patch, for the pod template fields a TrainJob's runtime
patches touch: Trainer v2.3 applies each runtimePatches entry, and `trainer`'s env and
resources, this way onto the runtime's JobSet template (docs/TRAINJOB.md).

Maps merge key by key; lists of objects with a patch merge key (containers, volumes, env,
volumeMounts, ...) merge item by item on that key; any other list is replaced; a null
deletes the key. Directives ($patch, $retainKeys) are not supported: nothing kctl-train
renders uses them.
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
}


def merge(base: Any, patch: Any, field: str = "") -> Any:
    """`patch` applied to `base` (neither is changed)."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        merged = [copy.deepcopy(item) for item in base]
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, Mapping)}
        for item in patch:
            at = index.get(item.get(key)) if isinstance(item, Mapping) else None
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)
