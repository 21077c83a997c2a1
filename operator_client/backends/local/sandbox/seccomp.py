"""A pod's seccomp profile, loaded with libseccomp (through pyseccomp) just before the
container's command is executed.

`RuntimeDefault` is the container runtime's default profile: what it leaves out of a
container, here refused with EPERM while everything else is allowed. The list follows the
system calls Docker's and containerd's default profiles refuse to a container without
extra capabilities (docs.docker.com, "Seccomp security profiles for Docker": the
significant blocked syscalls; moby's profiles/seccomp/default.json): kernel keyrings,
modules and kexec, mounts and new mount API, namespaces, tracing other processes' memory,
clocks, swap, reboot, BPF and perf events, io_uring. clone() with a namespace flag is
refused as well, and clone3() answers ENOSYS, so that the C library falls back to clone()
and its flags are checked (clone3 passes them in memory a filter cannot read).
`Unconfined` loads nothing. A `Localhost` profile names a file on the cluster's nodes; a
local run has none and refuses it before starting (podspec.seccomp_profile).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

RUNTIME_DEFAULT, UNCONFINED = "RuntimeDefault", "Unconfined"

BLOCKED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
    "delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
    "get_kernel_syms", "get_mempolicy", "init_module", "io_uring_enter", "io_uring_register",
    "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl",
    "lookup_dcookie", "mbind", "mount", "mount_setattr", "move_mount", "move_pages",
    "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open",
    "pivot_root", "process_vm_readv", "process_vm_writev", "query_module", "quotactl",
    "quotactl_fd", "reboot", "request_key", "set_mempolicy", "setns", "settimeofday",
    "stime", "swapoff", "swapon", "syslog", "sysfs", "_sysctl", "umount", "umount2",
    "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)  # fmt: skip

# clone() flags that make a new namespace (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWCGROUP).
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000)  # fmt: skip


def why_not() -> str | None:
    """None where seccomp filters can be loaded here, else why not."""
    try:
        import pyseccomp  # noqa: F401 - loads libseccomp
    except (ImportError, OSError) as exc:
        return f"libseccomp cannot be loaded ({exc}); apt-get install libseccomp2"
    return None


def prepare(profile: str) -> Callable[[], None]:
    """Build `profile`'s filter now (libseccomp is loaded from this machine, before the
    pod's root replaces it) and return what loads it into this process, inherited by
    everything it executes. Load it after no_new_privs: an unprivileged process may load a
    filter only then."""
    if profile == UNCONFINED:
        return lambda: None
    if profile != RUNTIME_DEFAULT:
        raise ValueError(f"seccomp profile {profile!r}: a local run applies RuntimeDefault only")
    import pyseccomp as sc

    refused = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(sc.ALLOW)
    arch = sc.system_arch()
    for name in BLOCKED:
        if sc.resolve_syscall(arch, name) < 0:
            continue  # not a system call on this architecture
        rules.add_rule(refused, name)
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(refused, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return rules.load  # type: ignore[no-any-return]
