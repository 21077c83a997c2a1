"""A user namespace for every pod, as Kubernetes gives a pod with `hostUsers: false`: the
pod's uid and gid 0 are an id of this machine that owns nothing (HOST_ROOT), so a
container running as root is no one here; every other id is the same number inside and
out, so a pod's files in its run directory belong to the uid it names. A pod's root has
no capability over anything of this machine, whatever its security context says."""

from __future__ import annotations

from pathlib import Path

# An id no account or file of this machine has; the pod's 0 is this one here.
HOST_ROOT = 0x7FFF0000
# Inside -> outside: 0 -> HOST_ROOT, and 1..HOST_ROOT-1 to themselves (host 0 is mapped
# by nothing: inside, this machine's root-owned files belong to the overflow id, nobody).
ID_MAP = f"0 {HOST_ROOT} 1\n1 1 {HOST_ROOT - 1}\n"


def host_id(pod_id: int) -> int:
    """The id of this machine that a pod's uid or gid is."""
    return HOST_ROOT if pod_id == 0 else pod_id


def write_maps(pid: int, proc: Path = Path("/proc")) -> None:
    """Map the ids of the user namespace process `pid` just made (as its parent, root)."""
    for name in ("uid_map", "gid_map"):
        (proc / str(pid) / name).write_text(ID_MAP)
