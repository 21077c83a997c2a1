"""Rendered manifests as files, for GitOps: one `<name>.<fmt>` per job in a directory,
and the drift between such a directory and a fresh render."""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .output import to_json, to_yaml


def _texts(manifests: Sequence[Mapping[str, Any]], fmt: str) -> dict[str, str]:
    dump = to_json if fmt == "json" else to_yaml
    return {f"{m['metadata']['name']}.{fmt}": dump(m) for m in manifests}


def write_manifests(
    directory: Path, manifests: Sequence[Mapping[str, Any]], fmt: str
) -> list[Path]:
    """Write each manifest beside its target, then rename (a reader never sees half a
    manifest); the paths written. OSError when the directory cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in _texts(manifests, fmt).items():
        target = directory / name
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
        written.append(target)
    return written


@dataclass
class Drift:
    """How a directory differs from a fresh render."""

    matched: int = 0
    missing: list[Path] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)  # one unified diff per changed file
    stale: list[Path] = field(default_factory=list)  # files no job renders

    @property
    def count(self) -> int:
        return len(self.missing) + len(self.diffs) + len(self.stale)


def drift(directory: Path, manifests: Sequence[Mapping[str, Any]], fmt: str) -> Drift:
    """Compare DIR/<name>.<fmt> with a fresh render of each manifest."""
    expected = _texts(manifests, fmt)
    found = Drift()
    for name, text in sorted(expected.items()):
        path = directory / name
        try:
            committed = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            found.missing.append(path)
            continue
        if committed == text:
            found.matched += 1
            continue
        found.diffs.append(
            "".join(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    f"{path} (committed)",
                    f"{path} (rendered now)",
                )
            )
        )
    found.stale = sorted(p for p in directory.glob(f"*.{fmt}") if p.name not in expected)
    return found
