"""Deterministic YAML and JSON text for manifests: same object, same bytes."""

from __future__ import annotations

import json
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style, key order as built, no line wrapping (long env values stay one line)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key, as kubectl prints them.
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        # Shared sub-objects (one affinity in two replicas) must print in full:
        # anchors and aliases confuse kubectl diff and GitOps tools.
        return True


def to_yaml(obj: Any) -> str:
    """YAML text of one manifest."""
    return yaml.dump(
        obj,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 20,
    )


def to_yaml_stream(objs: list[Any]) -> str:
    """Several manifests as one YAML stream separated by ``---``."""
    return "---\n".join(to_yaml(o) for o in objs)


def to_json(obj: Any) -> str:
    """Indented JSON text of one manifest (key order as built)."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
