"""What the kubelet makes of a container's `env` list: plain values, the downward API
and Secret references resolved to strings. Used by the local backend and the tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PodEnvError(Exception):
    """A variable cannot be resolved (a missing Secret key, an unsupported reference)."""


def resolve_env(
    container: Mapping[str, Any], *, pod_ip: str, secrets: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The container's environment as the process will see it."""
    out: dict[str, str] = {}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            out[name] = str(item["value"])
            continue
        ref = item.get("valueFrom", {})
        if ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            out[name] = pod_ip
        elif "secretKeyRef" in ref:
            secret, key = ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"]
            try:
                out[name] = secrets[secret][key]
            except KeyError:
                raise PodEnvError(f"{name}: Secret {secret!r} has no key {key!r}") from None
        else:
            raise PodEnvError(f"{name}: unsupported valueFrom {sorted(ref)}")
    return out
