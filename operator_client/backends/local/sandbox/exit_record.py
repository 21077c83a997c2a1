"""A pod's exit status, recorded by its shim (its parent) for whoever supervises it.

Only a process's parent can collect its exit status. A supervisor that died and was
started again is no pod's parent: it takes the status from this record instead, as a
kubelet reads a container's from its runtime after a restart. The record names the shim
that wrote it, so a record left by an earlier start of the pod is never taken for this
one's."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ....untrusted import read_json


def write(path: Path, shim_pid: int, code: int) -> None:
    """Record `code` (the shell's exit status: 128+N for signal N) as the exit of the pod
    whose shim is `shim_pid`; written beside and renamed, never seen half-written."""
    partial = path.with_name(f".{path.name}.{shim_pid}")
    with contextlib.suppress(OSError):  # a pod's exit is never held up by its record
        partial.write_text(json.dumps({"shim": shim_pid, "code": code}))
        os.replace(partial, path)


def read(path: Path, shim_pid: int) -> int | None:
    """The exit status the shim `shim_pid` recorded; None where it recorded none (it was
    killed itself) or the record is another's."""
    try:  # a regular file of a few bytes, as the shim writes it, or none
        raw = read_json(path, limit=256)
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("shim") != shim_pid:
        return None
    code = raw.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None
