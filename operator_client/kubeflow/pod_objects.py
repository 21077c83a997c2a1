"""Secrets and ConfigMaps a local run reads as a cluster's pods would: given as Kubernetes
manifests (`apply --local --secret FILE --configmap FILE`, what `kubectl get secret NAME -o
yaml` prints), used for env `valueFrom`/`envFrom` and for secret and configMap volumes."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec.k8s_names import config_key_problem, subdomain_problem
from .manifest_files import ManifestFileError, documents


@dataclass(frozen=True)
class PodObjects:
    """Secrets and ConfigMaps by name, each key's value as text."""

    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    configmaps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"secrets": dict(self.secrets), "configmaps": dict(self.configmaps)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PodObjects:
        return cls(dict(raw.get("secrets") or {}), dict(raw.get("configmaps") or {}))

    def of(self, kind: str) -> Mapping[str, Mapping[str, str]]:
        """The objects of `kind` ("Secret" or "ConfigMap") by name."""
        return self.secrets if kind == "Secret" else self.configmaps


# A Secret or ConfigMap, or a runtime, fetched by (kind, name, namespace): None when the
# source has none (a cluster, for a local run with --context).
Lookup = Callable[[str, str, str], "Mapping[str, Any] | None"]


def values_of(doc: Mapping[str, Any], kind: str) -> dict[str, str]:
    """Each key's text of a Secret or ConfigMap object (as the API server returns it)."""
    return _values(doc, kind, f"{kind} {(doc.get('metadata') or {}).get('name')!r}")


def references(templates: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """The (kind, name) of every Secret and ConfigMap the pod templates read: env
    valueFrom, envFrom and volumes."""
    found: set[tuple[str, str]] = set()
    for template in templates:
        spec = template.get("spec") or {}
        for volume in spec.get("volumes") or []:
            if "secret" in volume:
                found.add(("Secret", volume["secret"].get("secretName", "")))
            if "configMap" in volume:
                found.add(("ConfigMap", volume["configMap"].get("name", "")))
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            for item in container.get("env") or []:
                ref = item.get("valueFrom") or {}
                if "secretKeyRef" in ref:
                    found.add(("Secret", ref["secretKeyRef"].get("name", "")))
                if "configMapKeyRef" in ref:
                    found.add(("ConfigMap", ref["configMapKeyRef"].get("name", "")))
            for source in container.get("envFrom") or []:
                if "secretRef" in source:
                    found.add(("Secret", source["secretRef"].get("name", "")))
                if "configMapRef" in source:
                    found.add(("ConfigMap", source["configMapRef"].get("name", "")))
    return {(kind, name) for kind, name in found if name}


def load_objects(secrets: Iterable[str | Path], configmaps: Iterable[str | Path]) -> PodObjects:
    """The Secrets in `secrets` and the ConfigMaps in `configmaps` (YAML files of one or
    more documents). ManifestFileError for a file that is missing, not YAML, holds another
    kind, or a Secret whose `data` is not base64."""
    return PodObjects(_load(secrets, "Secret"), _load(configmaps, "ConfigMap"))


def _load(paths: Iterable[str | Path], kind: str) -> dict[str, dict[str, str]]:
    found = {}
    for path in map(Path, paths):
        for at, doc in documents(path, (kind,)):
            name = (doc.get("metadata") or {}).get("name")
            problem = subdomain_problem(name, f"{kind} name")
            if problem:
                raise ManifestFileError(f"{at}: {problem}")
            found[str(name)] = _values(doc, kind, at)
    return found


def _values(doc: Mapping[str, Any], kind: str, at: str) -> dict[str, str]:
    """Each key's text: a Secret's `data` is base64 (`stringData` wins, as the API server
    merges it); a ConfigMap's `data` is text, its `binaryData` base64."""
    encoded, plain = ("data", "stringData") if kind == "Secret" else ("binaryData", "data")
    for part in (encoded, plain):
        if not isinstance(doc.get(part) or {}, Mapping):
            raise ManifestFileError(f"{at}: {part} is not a mapping of keys to values")
        for key, value in (doc.get(part) or {}).items():
            problem = config_key_problem(key, f"{part} key")
            if problem:
                raise ManifestFileError(f"{at}: {problem}")
            if not isinstance(value, str):  # the API server takes strings only
                raise ManifestFileError(
                    f"{at}: {part}.{key} is a {type(value).__name__}, not a string (quote it)"
                )
    out: dict[str, str] = {}
    for key, value in (doc.get(encoded) or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True).decode(
                "utf-8", errors="replace"
            )
        except (binascii.Error, ValueError):
            raise ManifestFileError(f"{at}: {encoded}.{key} is not base64") from None
    out.update({str(k): str(v) for k, v in (doc.get(plain) or {}).items()})
    return out
