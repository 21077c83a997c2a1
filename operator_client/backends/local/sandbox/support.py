"""Whether this machine can run pod sandboxes, and which way a local job runs: in pod
sandboxes where it can, else as plain processes (with the reason, shown once)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from . import cgroups, seccomp
from .relay import loopback_port

SANDBOX, PROCESS, AUTO = "sandbox", "process", "auto"
MODES = (AUTO, SANDBOX, PROCESS)
MODE_ENV = "KCTL_TRAIN_LOCAL_PODS"


def _kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    try:
        return (int(release[0]), int(release[1])) >= (major, minor)
    except (IndexError, ValueError):
        return False


def _probe() -> str | None:
    """Try what a sandbox needs first, in a throw-away process (util-linux's unshare: no
    fork of this one, which may have threads): new namespaces, a user namespace among
    them (every pod has one: userns.py); and a kernel with
    mount_setattr (Linux 5.12) for the read-only root."""
    if not _kernel_at_least(5, 12):
        return f"Linux {os.uname().release} is older than 5.12 (no mount_setattr)"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    tried = subprocess.run(
        ["unshare", "--user", "--mount", "--net", "--pid", "--uts", "--ipc", "--fork", "true"],
        capture_output=True,
        text=True,
    )
    if tried.returncode != 0:
        return f"new namespaces refused: {tried.stderr.strip() or tried.returncode}"
    return None


@functools.cache
def why_not() -> str | None:
    """None where sandboxes can run here, else why not, with what would fix it."""
    if sys.platform != "linux":
        return "pod sandboxes need Linux namespaces"
    if os.geteuid() != 0:
        return "not root: pod sandboxes need root (namespaces, mounts, uid changes)"
    if shutil.which("ip") is None:
        return "iproute2 is not installed (apt-get install iproute2)"
    return seccomp.why_not() or _probe()


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
                "each has its own network namespace and address, the pod's uid in a user "
                "namespace of its own, a read-only view of this machine, tmpfs /tmp and "
                "/dev/shm, no capabilities; memory limits "
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
    missing = [why for why in (cgroups.why_not("memory"), cgroups.why_not("cpu")) if why]
    return PodsMode(
        SANDBOX,
        "root, namespaces",
        f"not enforced: {'; '.join(missing)}" if missing else "enforced (memory and CPU)",
    )
