"""Typed reads of the JSON documents a run stores (manifests, records, markers).

Whoever can write a store can write any JSON there: a number as a string, a list where a
name belongs, a step of 1.5. Each reader states the fields it needs; anything else is a
ValueError naming the document and the field, never a TypeError or KeyError later on.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from ..storage import ObjectStore, StoreError
from ..untrusted import is_finite_number

SHA256 = re.compile(r"[0-9a-f]{64}")
MANIFEST = "MANIFEST.json"
T = TypeVar("T")
log = logging.getLogger("kctl_train.store")


def committed_manifests(
    store: ObjectStore,
    prefix: str,
    parse: Callable[[str, bytes], T],
    what: str,
    problems: list[str] | None = None,
) -> list[T]:
    """Every MANIFEST.json below `prefix`, parsed by `parse(key, data)`. One that cannot be
    read or parsed is skipped like a unit never committed, with a warning naming its key
    (appended to `problems` too)."""
    found = []
    for obj in store.list(prefix + "/"):
        if obj.key.endswith("/" + MANIFEST):
            try:
                found.append(parse(obj.key, store.get_bytes(obj.key)))
            except (StoreError, ValueError) as exc:
                message = f"ignoring unreadable {what} {obj.key}: {exc}"
                log.warning("%s", message)
                if problems is not None:
                    problems.append(message)
    return found


class Document:
    """One JSON object being read; `what` names it in errors ("checkpoint manifest")."""

    def __init__(self, raw: Any, what: str) -> None:
        if not isinstance(raw, dict):
            raise ValueError(f"{what}: not a JSON object")
        self.raw, self.what = raw, what

    @classmethod
    def parse(cls, data: bytes | str, what: str) -> Document:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{what}: not valid JSON ({exc})") from None
        return cls(raw, what)

    def _bad(self, name: str, wanted: str) -> ValueError:
        value = self.raw.get(name)
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return ValueError(f"{self.what}: field {name!r} must be {wanted} (got {shown})")

    def has(self, name: str) -> bool:
        return name in self.raw and self.raw[name] is not None

    def count(self, name: str, minimum: int = 0) -> int:
        """A whole number >= `minimum` (not a bool, not a float, not a string)."""
        value = self.raw.get(name)
        if type(value) is not int or value < minimum:
            raise self._bad(name, f"a whole number >= {minimum}")
        return value

    def number(self, name: str) -> float:
        """A finite number."""
        value = self.raw.get(name)
        if not is_finite_number(value):
            raise self._bad(name, "a finite number")
        return float(value)

    def text(self, name: str, check: Callable[[str], object] | None = None) -> str:
        """A string; `check` raises ValueError for one that is not acceptable."""
        value = self.raw.get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        if check is not None:
            try:
                check(value)
            except ValueError as exc:
                raise ValueError(f"{self.what}: field {name!r}: {exc}") from None
        return value

    def sha256(self, name: str) -> str:
        value = self.raw.get(name)
        if not isinstance(value, str) or not SHA256.fullmatch(value):
            raise self._bad(name, "a sha256 in 64 lowercase hex digits")
        return value

    def objects(self, name: str) -> list[Document]:
        """A list of JSON objects, each a Document."""
        value = self.raw.get(name)
        if not isinstance(value, list):
            raise self._bad(name, "a list")
        return [Document(item, f"{self.what}: {name}[{i}]") for i, item in enumerate(value)]

    def texts(self, name: str) -> list[str]:
        """A list of strings."""
        value = self.raw.get(name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "a list of strings")
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name)
        if not isinstance(value, dict):
            raise self._bad(name, "a JSON object")
        return value
