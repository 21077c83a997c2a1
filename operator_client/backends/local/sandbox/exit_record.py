"""A pod's exit status, recorded by its shim (its parent: sandbox/shim.py, or for a replica
run as a process pods/keeper.py) for whoever supervises it.

Only a process's parent can collect its exit status. A supervisor that died and was
started again is no pod's parent: it takes the status from this record instead, as a
kubelet reads a container's from its runtime after a restart. The record names the shim
that wrote it, so a record left by an earlier start of the pod is never taken for this
one's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

from ....untrusted import read_json

# What a shim passes on to its pod's first process (SIGTERM from a pod deletion).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def forward_signals(pid: int) -> None:
    """Pass the signals a pod is sent on to its first process, `pid`."""
    for signum in FORWARDED:
        signal.signal(signum, lambda s, _f: os.kill(pid, s))


def code_of(status: int) -> int:
    """A wait status as the shell gives it: the exit code, or 128+N for signal N."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


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
