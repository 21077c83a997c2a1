"""Object keys and the local paths they may map to (docs/STORAGE.md, "Keys and local paths").

A store key comes from whoever wrote the bucket; before it becomes a local path it must
be a plain relative path that stays inside the destination (CVE-2022-31159 was a bare
startswith check).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafeKeyError(ValueError):
    """A key that must not become a local path."""


def join_key(*parts: str) -> str:
    """Join key parts with '/', without doubled or trailing separators."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def safe_relative_path(key: str) -> PurePosixPath:
    """The relative path a key maps to; UnsafeKeyError for absolute, drive, UNC, backslash,
    NUL, empty, '.' or '..' forms."""
    if not key:
        raise UnsafeKeyError("empty key")
    if "\x00" in key:
        raise UnsafeKeyError(f"key {key!r} contains NUL")
    if "\\" in key:
        raise UnsafeKeyError(f"key {key!r} contains a backslash")
    if key.startswith("/") or _DRIVE.match(key):
        raise UnsafeKeyError(f"key {key!r} is absolute")
    segments = key.split("/")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise UnsafeKeyError(f"key {key!r} has an empty, '.' or '..' segment")
    return PurePosixPath(*segments)


def contained_path(root: Path, key: str) -> Path:
    """root/key after resolving, refused unless it stays inside root."""
    relative = safe_relative_path(key)
    base = root.resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise UnsafeKeyError(f"key {key!r} leaves {base}")
    return target


def remove_empty_parents(path: Path, root: Path) -> None:
    """Remove the directories between path and root (exclusive) that are empty now:
    directories are not objects, and a deleted unit leaves none behind."""
    root = root.resolve()
    for parent in path.parents:
        if parent == root or not parent.is_relative_to(root):
            break
        try:
            parent.rmdir()
        except OSError:
            break
