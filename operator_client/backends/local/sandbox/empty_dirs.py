"""A pod's emptyDirs on this machine, kept as the kubelet keeps them: one tmpfs per
volume, mounted below the pod's directory by the supervisor for as long as the pod
lives, so that a container restarted in place finds what the last one wrote (its shim
binds each into the container, shim.py). They go with the pod: when it ends for good or
its operator makes it anew, and when the job's pods are released."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from . import linux


def hold(directory: Path, sizes: Mapping[str, int | None]) -> dict[str, Path]:
    """Each emptyDir volume (name -> size in bytes, None: the kernel's default) as a
    tmpfs at `directory`/NAME: mounted now, or already by an earlier container of the
    pod. The names are volume names, DNS labels (podspec.emptydirs checks them)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)  # the pod's files: its shim binds them in, no one else reaches them
    held = {}
    for name, size in sizes.items():
        path = directory / name
        if not os.path.ismount(path):
            path.mkdir(exist_ok=True)
            options = "mode=1777" + (f",size={size}" if size else "")
            linux.mount("tmpfs", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, options)
        held[name] = path
    return held


def release(directory: Path) -> None:
    """Unmount a pod's emptyDirs and remove their directory (the pod is gone). What the
    pod wrote is never followed: each tmpfs is detached whole, then only the empty mount
    points are left to remove."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        path = Path(entry.path)
        if os.path.ismount(path):
            with contextlib.suppress(FileNotFoundError):
                linux.unmount(path)
    shutil.rmtree(directory, ignore_errors=True)
