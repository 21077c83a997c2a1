"""The Linux calls a pod sandbox needs and Python 3.11's os module lacks (ctypes on libc):
namespaces, mounts, capabilities, no_new_privs. Each raises OSError with the errno."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (a post-5.x syscall)
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MNT_DETACH = 0x2
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    """Move this process into new namespaces (PID: its next child is PID 1 of the new one)."""
    _check(_libc.unshare(flags), "unshare")


def setns(path: Path | int, nstype: int) -> None:
    """Join the namespace at `path`, or of an open descriptor of one (a net namespace
    applies to the calling thread only)."""
    if isinstance(path, int):
        _check(_libc.setns(path, nstype), f"setns fd {path}")
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def mount(source: str, target: Path, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode(), str(target).encode(), fstype.encode() if fstype else None,
            ctypes.c_ulong(flags), data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )  # fmt: skip


def unmount(target: Path) -> None:
    """Detach the mount at `target` (MNT_DETACH: a process still inside cannot hold it;
    the filesystem goes once the last one leaves)."""
    _check(_libc.umount2(str(target).encode(), _MNT_DETACH), f"umount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def set_read_only(target: Path, *, read_only: bool, recursive: bool) -> None:
    """Make a mount (and, `recursive`, every mount below it) read-only or writable: one
    mount_setattr(2) where remounting each submount would be a walk of mountinfo."""
    attr = _MountAttr(
        _MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else _MOUNT_ATTR_RDONLY
    )
    result = _libc.syscall(
        _SYS_MOUNT_SETATTR, _AT_FDCWD, str(target).encode(),
        _AT_RECURSIVE if recursive else 0, ctypes.byref(attr), ctypes.sizeof(attr),
    )  # fmt: skip
    _check(result, f"mount_setattr {target}")


def sethostname(name: str) -> None:
    data = name.encode()
    _check(_libc.sethostname(data, len(data)), "sethostname")


def _prctl(option: int, arg: int = 0, arg3: int = 0) -> None:
    _check(
        _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0),
                    ctypes.c_ulong(0)),
        f"prctl {option}",
    )  # fmt: skip


def die_with_parent() -> None:
    """SIGKILL this process when the thread that forked it ends, however it ends; exits
    at once where that parent is gone already."""
    parent = os.getppid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges(uid: int, gid: int) -> None:
    """Become uid:gid with no supplementary groups, no capability in any set (bounding
    and ambient included) and no_new_privs: what `capabilities: {drop: [ALL]}`,
    `allowPrivilegeEscalation: false` and runAsUser/runAsGroup give a container."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _prctl(_PR_CAPBSET_DROP, cap)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective sets
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: the inheritable set too
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
