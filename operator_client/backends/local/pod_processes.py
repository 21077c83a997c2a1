"""Every process of one local replica ("pod"), wherever it went.

A pod's processes end with the pod. Locally a replica's process group is not enough:
torchrun starts its workers in sessions of their own, and a process can re-parent to
init when its parent dies, so neither the group nor the parent chain reaches them all.
The environment does: every process a replica starts inherits `KCTL_TRAIN_LOCAL_POD`
(set by the supervisor to `<job dir>#<replica>`), whatever its session or parent, and
/proc shows it. Ending a replica kills every process that carries its value; ending a
job kills every process whose value starts with the job's directory.

A program that deliberately starts children with an emptied environment escapes this;
a PID namespace per pod (a sandbox) is the complete answer, where one is available.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MARKER = "KCTL_TRAIN_LOCAL_POD"
_PROC = Path("/proc")


def marker_of(job_path: Path, replica: str) -> str:
    """The marker value of one replica of the job in `job_path`."""
    return f"{job_path.resolve()}#{replica}"


def job_prefix(job_path: Path) -> str:
    """The prefix every marker of one job's replicas starts with."""
    return f"{job_path.resolve()}#"


def _marker_of_pid(pid: int) -> str | None:
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, a kernel thread, or another user's
        return None
    wanted = MARKER.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(wanted):
            return entry[len(wanted) :].decode(errors="replace")
    return None


def find(prefix: str, *, exact: bool = False) -> list[int]:
    """PIDs of live processes whose marker equals (`exact`) or starts with `prefix`.
    Zombies have no environment left and are not listed: they have ended."""
    me = os.getpid()
    found = []
    try:
        entries = list(_PROC.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        value = _marker_of_pid(int(entry.name))
        if value is not None and (value == prefix if exact else value.startswith(prefix)):
            found.append(int(entry.name))
    return found


def kill_all(prefix: str, *, exact: bool = False, timeout: float = 10.0) -> list[int]:
    """SIGKILL every marked process until none is left (a process may fork while we
    kill); returns those still alive after `timeout` (empty: all gone)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = find(prefix, exact=exact)
        if not pids or time.monotonic() > deadline:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        time.sleep(0.05)
