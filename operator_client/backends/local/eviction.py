"""What the kubelet's eviction manager does about local storage, for a local run: the
pods of a job may write at most the sum of their `ephemeral-storage` limits into the
job's run directory of a `file://` store (the one volume a local pod writes on this
machine's disk), measured as the kubelet measures, every few seconds; past it the pods
are evicted with the kubelet's words. Each pod's writable root layer and emptyDirs are
tmpfs of a bounded size already (sandbox/shim.py, sandbox/empty_dirs.py). Pure but for
the measuring walk."""

from __future__ import annotations

import os
from pathlib import Path

# How often the supervisor measures (the kubelet's housekeeping runs every 10 s).
EVERY_SECONDS = 2.0
_UNITS = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def quantity(size: int) -> str:
    """Bytes as the API server prints a binary quantity: 20Gi, 1536Mi, 1000."""
    for suffix, unit in _UNITS:
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def usage(directory: Path, stop_above: int) -> int:
    """Bytes of disk the files below `directory` take (allocated blocks, links not
    followed); the walk stops once past `stop_above`, so an endless tree costs little."""
    total = 0
    stack = [directory]
    while stack and total <= stop_above:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return total


def eviction(used: int, limit: int, where: Path) -> str | None:
    """The eviction message when `used` bytes exceed `limit` (None: within it)."""
    if used <= limit:
        return None
    return (
        f"Pod ephemeral local storage usage exceeds the total limit of containers "
        f"{quantity(limit)}. (the job's run directory {where} holds over {quantity(used)}; "
        "raise resources.limits.ephemeral-storage, or KCTL_TRAIN_LOCAL_EPHEMERAL_STORAGE)"
    )
