"""A `file://` store on this machine: which directories local runs may use, and what of
one a pod may write.

A `file://` store is a directory on this machine that local runs write as root
(processes) or hand to a pod's user (sandboxes), so it must be one kctl-train owns:
under $KCTL_TRAIN_HOME, or a directory the user names that is empty or was made by
kctl-train (marked with MARKER). System directories are refused, and so is a path through
a symbolic link. A pod then gets its own run directory only, as a cluster pod gets its own
volume: made for it when missing, never a chown of anything that existed before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ...runstore.location import home

# Written by kctl-train into the root of every file:// store it made or adopted.
MARKER = ".kctl-train-store"
# Never a store, nor anything below them: the system's own trees.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                "/proc", "/run", "/sbin", "/sys", "/usr")  # fmt: skip
# Never a store themselves (a directory below them may be one).
SYSTEM_DIRS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var",
               "/var/lib", "/var/tmp")  # fmt: skip


class StoreRefused(ValueError):
    """A file:// store a local run must not use; the message says why and what to do."""


def file_store_path(uri: str) -> Path | None:
    """The directory of a file:// URI (None for any other store)."""
    parts = urlsplit(uri)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _link_on_the_way(path: Path) -> Path | None:
    """The first existing component of `path` that is a symbolic link (None: none is)."""
    current = Path("/")
    for part in path.parts[1:]:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return current
        except FileNotFoundError:
            return None
    return None


def store_problem(root: Path) -> str | None:
    """Why `root` cannot be a local run's file:// store (None: it can), without changing
    anything."""
    text = str(root)
    if not root.is_absolute() or os.path.normpath(text) != text:
        return f"{text} is not an absolute path in its normal form"
    if text in SYSTEM_DIRS or any(text == t or text.startswith(t + "/") for t in SYSTEM_TREES):
        return f"{text} is a system directory"
    state = home().resolve()
    if root in (Path.home(), state, state / "local") or state / "local" in root.parents:
        return f"{text} holds your home or kctl-train's own state"
    link = _link_on_the_way(root)
    if link is not None:
        return f"{link} on the way to {text} is a symbolic link; name the real directory"
    outer = next((p for p in root.parents if (p / MARKER).is_file()), None)
    if outer is not None:
        return (
            f"{text} lies inside the store {outer}, where other jobs' runs are; name {outer} "
            "itself (each job gets its own directory there)"
        )
    if not root.exists() or _owned(root):
        return None
    if not root.is_dir():
        return f"{text} is not a directory"
    if any(root.iterdir()):
        return (
            f"{text} holds files kctl-train did not make; use an empty directory or one under "
            f"{state} (if it is the store of an earlier kctl-train, mark it: touch {root / MARKER})"
        )
    return None


def _owned(root: Path) -> bool:
    return (root.is_dir() and (root / MARKER).is_file()) or home().resolve() in root.parents


def claim(root: Path) -> None:
    """Make `root` a store of kctl-train's (created and marked); StoreRefused when it must
    not be one."""
    problem = store_problem(root)
    if problem:
        raise StoreRefused(problem)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    if not marker.exists():
        marker.write_text("a kctl-train object store: local runs write run directories here\n")


def run_directory(run_root: Path, store: Path, uid: int, gid: int) -> Path:
    """The pod's own run directory under a claimed store, made for its user when missing.
    An existing one is used as it is when that user owns it; anything else is refused
    (kctl-train never changes the owner of what it did not just make)."""
    current = store
    for part in run_root.relative_to(store).parts:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            current.mkdir(mode=0o755)
            if current == run_root:
                os.chown(current, uid, gid)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise StoreRefused(f"{current} is not a directory (a link or a file is there)")
    info = os.lstat(run_root)
    if info.st_uid != uid:
        raise StoreRefused(
            f"the run directory {run_root} belongs to uid {info.st_uid} (a run as processes "
            f"wrote it); a pod runs as uid {uid} and cannot write it: run this job as "
            "processes (KCTL_TRAIN_LOCAL_PODS=process), or move the directory away to start "
            "fresh"
        )
    return run_root


def roots(run_root_uri: str) -> tuple[Path, Path] | None:
    """(store, run directory) of a file:// run root `<store>/<namespace>/<name>/` (None
    for any other store)."""
    run = file_store_path(run_root_uri)
    if run is None:
        return None
    run = Path(os.path.normpath(run))
    return run.parents[1], run
