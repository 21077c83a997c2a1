"""Deterministic YAML and JSON text for manifests: same object, same bytes."""

from __future__ import annotations

import json
import math
from decimal import Decimal
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


def _go_string(text: str) -> str:
    """A JSON string escaped as Go's encoding/json does (and so Helm's toJson)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go_float(value: float) -> str:
    """A float as Go's encoding/json writes it: shortest digits, plain notation unless the
    exponent is below -6 or from 21, an exponent without leading zeros."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"  # Go keeps the sign of zero
    if 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exponent = repr(value).partition("e")
    sign = exponent[0] if exponent[0] in "+-" else "+"
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys, byte for byte what Go's json.Marshal (Helm's toJson)
    writes for the same data: the form that is hashed and carried in the manifest, so the
    Helm chart produces the same text and hash."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, str):
        return _go_string(obj)
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{obj} has no JSON form")
        return _go_float(obj)
    if isinstance(obj, dict):
        items = sorted(obj.items())
        return "{" + ",".join(f"{_go_string(k)}:{canonical_json(v)}" for k, v in items) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in obj) + "]"
    raise TypeError(f"{type(obj).__name__} is not JSON data")
