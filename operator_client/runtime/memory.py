"""How much memory a rank may still take: the pod's (its cgroup's) limit and what its
processes hold, so a checkpoint's staging buffers that would not fit are refused at the
first save with a message, not met by the OOM killer mid-run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number.
NO_LIMIT_V1 = 1 << 62
# What the staging may take of what is left: DCP's own buffers, Python and the allocator
# need the rest.
HEADROOM = 0.9


@dataclass(frozen=True)
class PodMemory:
    limit: int  # bytes the pod's cgroup may hold
    used: int  # bytes its processes hold now (anonymous memory: not page cache)


def _cgroup_dirs(proc_cgroup: str) -> tuple[Path | None, Path | None]:
    """The process's v2 and v1-memory cgroup directories, from /proc/self/cgroup."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            v2 = CGROUP / relative
        elif "memory" in controllers.split(","):
            v1 = CGROUP / "memory" / relative
    return v2, v1


def _stat(path: Path, field: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == field:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def pod_memory(proc_cgroup: str | None = None) -> PodMemory | None:
    """The pod's memory limit and use, None where no limit applies or none can be read
    (a process outside a limited cgroup: a local run as plain processes)."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    v2, v1 = _cgroup_dirs(proc_cgroup)
    # A container's cgroup namespace shows its own cgroup as the root: try both places.
    for directory in (v2, CGROUP) if v2 is not None else ():
        limit = _number(directory / "memory.max")
        used = _stat(directory / "memory.stat", "anon")
        if limit is not None and used is not None:
            return PodMemory(limit, used)
    for directory in (v1, CGROUP / "memory") if v1 is not None else ():
        limit = _number(directory / "memory.limit_in_bytes")
        used = _stat(directory / "memory.stat", "total_rss")
        if limit is not None and used is not None and limit < NO_LIMIT_V1:
            return PodMemory(limit, used)
    return None


def rss() -> int:
    """This process's resident set, bytes."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def staging_problem(share: int, local_ranks: int, memory: PodMemory | None) -> str | None:
    """Why this rank must not make staging buffers for a `share`-byte share of each
    checkpoint when `local_ranks` ranks of the pod each make theirs (None: it fits, or
    no limit is known)."""
    if memory is None:
        return None
    needed = share * local_ranks
    room = int(memory.limit * HEADROOM) - memory.used
    if needed <= room:
        return None
    return (
        f"a checkpoint needs {gib(needed)} of staging buffers on this pod ({local_ranks} "
        f"rank(s) x {gib(share)}, each rank's share of the state), and the pod's memory "
        f"limit of {gib(memory.limit)} leaves {gib(max(room, 0))} of its {HEADROOM:.0%} "
        f"after the {gib(memory.used)} in use: raise spec.resources.memory, or spread the "
        "state over more nodes (a smaller share per rank)"
    )
