"""Whether this machine can run pod sandboxes, and which way a local job runs: in pod
sandboxes where it can, else as plain processes (with the reason, shown once)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import cgroups, linux
from .relay import loopback_port

SANDBOX, PROCESS, AUTO = "sandbox", "process", "auto"
MODES = (AUTO, SANDBOX, PROCESS)
MODE_ENV = "KCTL_TRAIN_LOCAL_PODS"


def _probe() -> str | None:
    """Try, in a throw-away child, what a sandbox does first: new namespaces and a
    read-only mount (mount_setattr, Linux 5.12+)."""
    pid = os.fork()
    if pid == 0:
        try:
            linux.unshare(
                linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWPID | linux.CLONE_NEWUTS
            )
            linux.mount("none", Path("/"), None, linux.MS_REC | linux.MS_PRIVATE)
            linux.set_read_only(Path("/"), read_only=True, recursive=False)
            os._exit(0)
        except OSError as exc:
            os.write(2, f"{exc}\n".encode())
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else "namespaces or mounts refused"


def why_not() -> str | None:
    """None where sandboxes can run here, else why not, with what would fix it."""
    if sys.platform != "linux":
        return "pod sandboxes need Linux namespaces"
    if os.geteuid() != 0:
        return "not root: pod sandboxes need root (namespaces, mounts, uid changes)"
    if shutil.which("ip") is None:
        return "iproute2 is not installed (apt-get install iproute2)"
    return _probe()


@dataclass(frozen=True)
class PodsMode:
    """How a local job's replicas run, and why; saved in its directory (pods.json)."""

    mode: str  # SANDBOX or PROCESS
    why: str
    memory: str  # whether memory limits are enforced, for status

    @property
    def sandboxed(self) -> bool:
        return self.mode == SANDBOX

    def describe(self) -> str:
        return "pod sandboxes" if self.sandboxed else f"processes: {self.why}"

    def detail(self) -> str:
        """What the mode means for the job, for `doctor --local`."""
        if self.sandboxed:
            return (
                "each has its own network namespace and address, the pod's uid, a read-only "
                "root, tmpfs /tmp and /dev/shm, no capabilities; memory limits "
                f"{self.memory}"
            )
        return (
            "they share this machine's loopback, filesystem and user "
            f"(set {MODE_ENV}=sandbox to require sandboxes)"
        )


def choose(requested: str, endpoint: str | None) -> PodsMode:
    """The mode a job runs in. `requested`: auto (sandboxes where possible), sandbox (an
    error where not: OSError), process. `endpoint` is the job's S3 endpoint: sandboxes
    reach a store on this machine's loopback (relayed) or a file:// one, nothing else."""
    if requested == PROCESS:
        return PodsMode(PROCESS, f"{MODE_ENV}=process", "not enforced (processes)")
    reason = why_not()
    if reason is None and endpoint and loopback_port(endpoint) is None:
        reason = f"the store endpoint {endpoint} is not on this machine's loopback"
    if reason is not None:
        if requested == SANDBOX:
            raise OSError(f"pod sandboxes are not possible here: {reason}")
        return PodsMode(PROCESS, reason, "not enforced (processes)")
    memory = cgroups.why_not()
    return PodsMode(
        SANDBOX, "root, namespaces", f"not enforced: {memory}" if memory else "enforced"
    )
