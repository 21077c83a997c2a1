"""What the kubelet makes of a container's `env` and `envFrom`: plain values, the
downward API, and keys of Secrets and ConfigMaps resolved to strings (envFrom first, then
env, later entries winning). Used by the local backend and the tests."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..kubeflow.pod_objects import PodObjects

# A C identifier, as envFrom keeps only keys that are valid variable names (others are
# skipped, and the kubelet records an event).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_REFS = {"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}
_SOURCES = {"secretRef": "Secret", "configMapRef": "ConfigMap"}


class PodEnvError(Exception):
    """A variable cannot be resolved (a missing Secret key, an unsupported reference)."""


def _missing(kind: str, name: str) -> str:
    """The kubelet's words for a missing object (CreateContainerConfigError)."""
    return (
        f"CreateContainerConfigError: {kind.lower()} {name!r} not found (give it with "
        f"--{kind.lower()} FILE, or mark the reference optional: true)"
    )


def resolve_env(
    container: Mapping[str, Any],
    *,
    pod_ip: str,
    objects: PodObjects,
    fields: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment as the process will see it. `fields`: the downward
    API's values by fieldPath (metadata.name, metadata.labels['key'], ...). A reference
    marked `optional` to something absent is left out, as the kubelet does."""
    out: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for field, kind in _SOURCES.items():
            ref = source.get(field)
            if ref is None:
                continue
            values = objects.of(kind).get(ref.get("name", ""))
            if values is None:
                if ref.get("optional"):
                    continue
                raise PodEnvError(f"envFrom: {_missing(kind, ref.get('name', ''))}")
            out.update({prefix + k: v for k, v in values.items() if _ENV_NAME.match(prefix + k)})
    known = {**(fields or {}), "status.podIP": pod_ip}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item or not item.get("valueFrom"):
            out[name] = str(item.get("value", ""))
            continue
        ref = item["valueFrom"]
        if "fieldRef" in ref:
            path = ref["fieldRef"].get("fieldPath", "")
            if path not in known and not path.startswith(
                ("metadata.labels[", "metadata.annotations[")
            ):
                raise PodEnvError(f"{name}: fieldRef {path!r} is not one a local run resolves")
            # A label or annotation the pod lacks resolves to "" (the kubelet's way).
            out[name] = known.get(path, "")
            continue
        found = next((f for f in _REFS if f in ref), None)
        if found is None:
            raise PodEnvError(f"{name}: unsupported valueFrom {sorted(ref)}")
        kind, key_ref = _REFS[found], ref[found]
        values = objects.of(kind).get(key_ref.get("name", ""))
        if values is None or key_ref.get("key") not in values:
            if key_ref.get("optional"):
                continue
            if values is None:
                raise PodEnvError(f"{name}: {_missing(kind, key_ref.get('name', ''))}")
            raise PodEnvError(
                f"{name}: CreateContainerConfigError: couldn't find key {key_ref['key']!r} "
                f"in {kind} {key_ref['name']!r}"
            )
        out[name] = values[key_ref["key"]]
    return out
