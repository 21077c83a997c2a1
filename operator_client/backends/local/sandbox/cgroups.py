"""A pod's memory limit, as the kubelet sets it: a cgroup with the limit, the pod's
processes in it. cgroup v2 (memory.max) or v1 (memory.limit_in_bytes), whichever this
machine mounts writable; where neither is, the limit is not enforced and status says so."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "kctl-train"


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path
    version: int

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the pod for going over the limit."""
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (self.path / events).read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        # The pod's processes are gone (PID 1 ended), but the kernel may take a moment.
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def memory_hierarchy() -> tuple[Path, int] | None:
    """Where this machine's memory controller is mounted writable, and its version."""
    if "memory" in _read(ROOT / "cgroup.controllers").split():
        return ROOT, 2
    v1 = ROOT / "memory"
    if (v1 / "memory.limit_in_bytes").is_file() and os.access(v1, os.W_OK):
        return v1, 1
    return None


def why_not() -> str | None:
    """None where memory limits can be enforced, else why not (for status and doctor)."""
    if memory_hierarchy() is None:
        return "no writable cgroup memory controller on this machine"
    return None


def create(name: str, limit: int) -> MemoryCgroup:
    """A cgroup `kctl-train/<name>` with the memory limit (and no swap beyond it)."""
    found = memory_hierarchy()
    if found is None:
        raise OSError(why_not())
    root, version = found
    parent = root / PARENT
    parent.mkdir(exist_ok=True)
    if version == 2:
        with contextlib.suppress(OSError):  # let children use the memory controller
            (parent / "cgroup.subtree_control").write_text("+memory")
    path = parent / name
    path.mkdir(exist_ok=True)
    if version == 2:
        (path / "memory.max").write_text(str(limit))
        with contextlib.suppress(OSError):
            (path / "memory.swap.max").write_text("0")
    else:
        (path / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):
            (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
    return MemoryCgroup(path, version)


def discard(name: str) -> None:
    """Remove the cgroup `kctl-train/<name>` if it is still there."""
    found = memory_hierarchy()
    if found is not None:
        MemoryCgroup(found[0] / PARENT / name, found[1]).remove()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
