"""A pod's memory and CPU limits, as the kubelet sets them: a cgroup with the limits, the
pod's processes in it. cgroup v2 (memory.max, cpu.max) or v1 (memory.limit_in_bytes;
cpu.cfs_quota_us in the cpu hierarchy), whichever this machine mounts writable; where
neither is, a limit is not enforced and status says so."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "kctl-train"
# The CFS period the kubelet uses: a limit of N CPUs is N x 100 ms of CPU time per 100 ms.
CPU_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel's smallest quota


@dataclass(frozen=True)
class PodCgroup:
    """The pod's cgroup: one directory (v2), or one per hierarchy (v1: memory, cpu)."""

    paths: tuple[Path, ...]
    version: int
    memory: Path | None = None  # where the memory controller's files are

    def add(self, pid: int) -> None:
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the pod for going over the limit."""
        if self.memory is None:
            return False
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (self.memory / events).read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        for path in self.paths:
            _remove(path)


def _remove(path: Path) -> None:
    # The pod's processes are gone (PID 1 ended), but the kernel may take a moment.
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _hierarchy(controller: str) -> tuple[Path, int] | None:
    """Where this machine's `controller` (memory, cpu) is mounted writable, and its version."""
    if controller in _read(ROOT / "cgroup.controllers").split():
        return ROOT, 2
    v1 = ROOT / controller
    probe = {"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}[controller]
    if (v1 / probe).is_file() and os.access(v1, os.W_OK):
        return v1, 1
    return None


def memory_hierarchy() -> tuple[Path, int] | None:
    """Where this machine's memory controller is mounted writable, and its version."""
    return _hierarchy("memory")


def pod_memory_dir(name: str) -> tuple[Path, int] | None:
    """The memory cgroup create() made for pod `name`, and its version (None: none)."""
    found = _hierarchy("memory")
    if found is None or not (found[0] / PARENT / name).is_dir():
        return None
    return found[0] / PARENT / name, found[1]


def why_not(controller: str = "memory") -> str | None:
    """None where `controller` limits can be enforced, else why not (status and doctor)."""
    if _hierarchy(controller) is None:
        return f"no writable cgroup {controller} controller on this machine"
    return None


def create(name: str, memory: int | None, cpus: float | None = None) -> PodCgroup:
    """A cgroup `kctl-train/<name>` with the memory limit (and no swap beyond it) and the
    CPU quota, each where this machine enforces it; OSError where it enforces neither."""
    paths: dict[Path, None] = {}
    version, memory_path = 1, None
    if memory is not None and (found := _hierarchy("memory")) is not None:
        root, version = found
        memory_path = _make(root, name, version, "memory")
        _set_memory(memory_path, memory, version)
        paths[memory_path] = None
    if cpus is not None and (found := _hierarchy("cpu")) is not None:
        root, version = found
        path = _make(root, name, version, "cpu")
        quota = max(MIN_QUOTA_US, int(cpus * CPU_PERIOD_US))
        if version == 2:
            (path / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            (path / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
        paths[path] = None
    if not paths:
        raise OSError(why_not("memory" if memory is not None else "cpu"))
    return PodCgroup(tuple(paths), version, memory_path)


def _make(root: Path, name: str, version: int, controller: str) -> Path:
    parent = root / PARENT
    parent.mkdir(exist_ok=True)
    if version == 2:
        with contextlib.suppress(OSError):  # let children use the controller
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    path = parent / name
    path.mkdir(exist_ok=True)
    return path


def _set_memory(path: Path, limit: int, version: int) -> None:
    if version == 2:
        (path / "memory.max").write_text(str(limit))
        with contextlib.suppress(OSError):
            (path / "memory.swap.max").write_text("0")
    else:
        (path / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):
            (path / "memory.memsw.limit_in_bytes").write_text(str(limit))


def discard(name: str) -> None:
    """Remove the cgroup `kctl-train/<name>` wherever it is still there."""
    for controller in ("memory", "cpu"):
        found = _hierarchy(controller)
        if found is not None:
            _remove(found[0] / PARENT / name)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
