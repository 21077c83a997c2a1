"""The per-replica sandbox launcher (a container runtime's shim, in small): run as root
by the supervisor as `python -m operator_client.backends.local.sandbox.shim POD.json`.

It joins the pod's network namespace, takes new mount, PID, UTS and IPC namespaces and
forks the container's first process, which assembles the pod's root (podspec.py), takes
a user namespace of its own (userns.py: the pod's root is no one on this machine), enters
the root, drops to the pod's uid with no capabilities and execs the container's command
as PID 1 of the pod. The shim stays outside: it places that process in the pod's cgroup
(memory and CPU limits), relays a store on this machine's loopback into the pod
(relay.py), forwards signals to it (SIGTERM from a pod deletion), records its exit status
(exit_record.py: for a supervisor that is not its parent) and exits as it exits. When
PID 1 ends, the kernel ends every other process of the pod: no trainer
outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from . import cgroups, exit_record, linux, relay, seccomp
from .podspec import PodSandbox
from .userns import host_id, write_maps

_MOUNT_FLAGS = linux.MS_NOSUID | linux.MS_NODEV


def _inside(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _ensure(target: Path, like: str) -> None:
    """A mount point for `like` at `target`: a directory or an empty file."""
    if os.path.isdir(like):
        target.mkdir(parents=True, exist_ok=True)
    elif not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()


def _open_to(path: str, uid: int, gid: int) -> bool:
    """Whether the pod's user may traverse the directory `path` of this machine."""
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    return bool(st.st_mode & (0o010 if st.st_gid == gid else 0o001))


def _within(path: str, regions: set[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in regions)


def _tmpfs(target: Path, options: str) -> None:
    linux.mount("tmpfs", target, "tmpfs", _MOUNT_FLAGS, options)


def expose(root: Path, path: str, uid: int, gid: int, made: set[str]) -> None:
    """Show this machine's `path` at the same place in the pod's root, as an image holds
    its files: readable by the pod's user even where a directory on the way is private
    to another (a home of mode 0700, pytest's temporary directories). Such a directory is
    replaced by an empty tmpfs holding only the way to `path`; a private `path` itself by
    one holding each of its entries. `made`: directories of the pod's root that are ours
    (tmpfs), where the way is made with mkdir."""
    parts = Path(path).parts
    for depth in range(2, len(parts)):
        step = str(Path(*parts[:depth]))
        target = _inside(root, step)
        if _within(step, made) or not target.exists():
            target.mkdir(exist_ok=True)
        elif not _open_to(step, uid, gid):
            _tmpfs(target, "mode=755")
            made.add(step)
    target = _inside(root, path)
    if os.path.isdir(path) and not _open_to(path, uid, gid):
        if _within(path, made):
            target.mkdir(exist_ok=True)
        else:
            _tmpfs(target, "mode=755")
            made.add(path)
        for entry in os.scandir(path):
            _ensure(target / entry.name, entry.path)
            linux.mount(entry.path, target / entry.name, None, linux.MS_BIND)
        return
    _ensure(target, path)
    linux.mount(path, target, None, linux.MS_BIND)


# The device nodes every container gets (a container runtime's default /dev).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
DEV_LINKS = {"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
             "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2"}  # fmt: skip


def _devices(root: Path, extra: tuple[str, ...]) -> None:
    """A /dev of its own: a tmpfs with the basic device nodes (and the GPUs the container
    requests) bound from this machine, nothing else of this machine's /dev."""
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    linux.mount("tmpfs", dev, "tmpfs", linux.MS_NOSUID, "mode=755")
    for node in (*DEVICES, *extra):
        if os.path.exists(node):
            target = _inside(root, node)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
            linux.mount(node, target, None, linux.MS_BIND)
    for link, to in DEV_LINKS.items():
        _inside(root, link).symlink_to(to)


def _hide(root: Path, path: str) -> None:
    """Show `path` empty: a directory as an empty tmpfs (what is shown below it is
    mounted on it), a file as /dev/null."""
    target = _inside(root, path)
    if target.is_symlink() or not target.exists():
        return
    if target.is_dir():
        _tmpfs(target, "mode=755")
    else:
        linux.mount("/dev/null", target, None, linux.MS_BIND)


def _layer(image: str, root: Path, size: str) -> None:
    """The image's root filesystem at `root` under a writable layer of the pod's own (an
    overlay whose upper directory is a tmpfs of this mount namespace): what the pod writes
    to its root stays in its memory and goes with it, never into the image's files."""
    layer = root.parent / "layer"
    layer.mkdir(exist_ok=True)
    _tmpfs(layer, f"mode=755{size}")
    (layer / "upper").mkdir()
    (layer / "work").mkdir()
    options = f"lowerdir={image},upperdir={layer / 'upper'},workdir={layer / 'work'}"
    linux.mount("overlay", root, "overlay", _MOUNT_FLAGS, options)


def build_root(pod: PodSandbox) -> Path:
    """Assemble the pod's root at `pod.stage` (in this process's private mount namespace):
    an image's root filesystem, or an empty root holding only what pod.binds show."""
    os.umask(0o022)
    root = Path(pod.stage)
    linux.mount("none", Path("/"), None, linux.MS_REC | linux.MS_PRIVATE)
    made: set[str] = set()
    size = f",size={pod.ephemeral_limit}" if pod.ephemeral_limit else ""
    if pod.rootfs is not None and not pod.read_only_root:
        _layer(pod.rootfs, root, size)
    elif pod.rootfs is not None:
        linux.mount(pod.rootfs, root, None, linux.MS_BIND | linux.MS_REC)
    else:
        _tmpfs(root, f"mode=755{size}")
        made.add("/")
        for mount_point in ("proc", "sys"):
            (root / mount_point).mkdir()
        for path, to in sorted(pod.links.items()):
            target = _inside(root, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(to)
    _devices(root, pod.devices)
    made.add("/dev")
    # The pod's emptyDirs, before what is shown below them: the supervisor's tmpfs,
    # which outlive this container (empty_dirs.py).
    for volume in pod.empty_dirs:
        target = _inside(root, volume.target)
        target.mkdir(parents=True, exist_ok=True)
        linux.mount(volume.source, target, None, linux.MS_BIND)
        made.add(volume.target)
    # Parents first: a path below another is shown on top of it, not hidden under it; a
    # hidden path after what shows it and before what is mounted below it.
    # Not recursive: what is mounted below a path on this machine is not the pod's.
    shown = [(len(Path(b.path).parts), 0, b.path) for b in pod.binds]
    shown += [(len(Path(h).parts), 1, h) for h in pod.hidden]
    for _, hide, path in sorted(shown):
        if hide:
            _hide(root, path)
            made.add(path)
        else:
            expose(root, path, host_id(pod.uid), host_id(pod.gid), made)
    # As a container runtime does, the working directory is made when the image lacks it.
    _inside(root, pod.workdir).mkdir(parents=True, exist_ok=True)
    for path, source in sorted(pod.files.items()):
        target = _inside(root, path)
        _ensure(target, source)
        linux.mount(source, target, None, linux.MS_BIND)
    for volume in sorted(pod.volumes, key=lambda v: len(Path(v.target).parts)):
        target = _inside(root, volume.target)
        _ensure(target, volume.source)
        linux.mount(volume.source, target, None, linux.MS_BIND)
        if volume.read_only:
            linux.set_read_only(target, read_only=True, recursive=False)
    # Everything this machine shows the pod is read-only whatever the pod's uid (uid 0
    # included); then what is the pod's own is made writable again: its emptyDirs, its
    # run directory, writable volumes and, with readOnlyRootFilesystem false, its root,
    # which is its own layer (a tmpfs, or an overlay on the image), never a host path.
    if not pod.read_only_root:
        os.chown(root, host_id(pod.uid), host_id(pod.gid))  # its own layer: its root's
    linux.set_read_only(root, read_only=True, recursive=True)
    writable = [b.path for b in pod.binds if b.writable]
    writable += [v.target for v in (*pod.empty_dirs, *pod.volumes) if not v.read_only]
    if not pod.read_only_root:
        writable.insert(0, "/")
    for path in writable:
        linux.set_read_only(_inside(root, path), read_only=False, recursive=False)
    linux.mount("proc", root / "proc", "proc", _MOUNT_FLAGS | linux.MS_NOEXEC)
    linux.mount("sysfs", root / "sys", "sysfs", _MOUNT_FLAGS | linux.MS_NOEXEC | linux.MS_RDONLY)
    _mount_memory_cgroup(pod, root / "sys" / "fs" / "cgroup")
    return root


def _mount_memory_cgroup(pod: PodSandbox, cgroupfs: Path) -> None:
    """The pod's memory cgroup, read-only where a container finds its own (containerd
    mounts the container's cgroup there): what the runtime reads the pod's limit from."""
    found = cgroups.pod_memory_dir(pod.cgroup_name) if pod.cgroup_name else None
    if found is None:
        return
    source, version = found
    target = cgroupfs
    if version == 1:  # one hierarchy per controller, below a tmpfs
        linux.mount("tmpfs", cgroupfs, "tmpfs", _MOUNT_FLAGS | linux.MS_NOEXEC, "mode=755")
        target = cgroupfs / "memory"
        target.mkdir()
    linux.mount(str(source), target, None, linux.MS_BIND)
    linux.set_read_only(cgroupfs, read_only=True, recursive=True)


def _container(pod: PodSandbox, ready: int, unshared: int, mapped: int) -> None:
    """The pod's first process: never returns."""
    try:
        os.read(ready, 1)  # placed in the cgroup
        os.close(ready)
        load_seccomp = seccomp.prepare(pod.seccomp)
        root = build_root(pod)
        linux.sethostname(pod.pod)
        # Its own user namespace, once every mount is made (as this machine's root) and
        # before the chroot (the kernel refuses a new one to a chrooted process); the
        # shim writes its id maps.
        linux.unshare(linux.CLONE_NEWUSER)
        os.write(unshared, b"u")
        if os.read(mapped, 1) != b"m":
            raise OSError("the shim did not map the pod's user namespace")
        os.chroot(root)
        os.chdir(pod.workdir)
        linux.drop_privileges(pod.uid, pod.gid)
        load_seccomp()
        os.execvpe(pod.command[0], list(pod.command), pod.env)
    except BaseException as exc:
        message = f"the pod sandbox did not start: {exc}"
        print(f"kctl-train sandbox: {message}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            Path(pod.termination_log).write_text(message)
    os._exit(128)


def run(pod: PodSandbox) -> int:
    """Start the pod's container, wait for it; its exit status, as the shell gives it."""
    upstream = relay.this_network() if pod.store_port else None
    linux.setns(Path(pod.netns), linux.CLONE_NEWNET)
    store = None
    if pod.store_port and upstream is not None:  # listening in the pod's namespace
        store = relay.start(pod.store_port, upstream, Path(pod.store_cut))
    linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWPID | linux.CLONE_NEWUTS | linux.CLONE_NEWIPC)
    cgroup = None
    if pod.memory_limit or pod.cpu_limit:
        with contextlib.suppress(OSError):  # neither enforced here: status says so
            cgroup = cgroups.create(pod.cgroup_name, pod.memory_limit, pod.cpu_limit)
    ready, go = os.pipe()
    unshared_r, unshared_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (go, unshared_r, mapped_w):
            os.close(fd)
        _container(pod, ready, unshared_w, mapped_r)
    for fd in (ready, unshared_w, mapped_r):
        os.close(fd)
    exit_record.forward_signals(pid)
    try:
        if cgroup is not None:
            cgroup.add(pid)
    finally:
        os.write(go, b"x")
        os.close(go)
    with contextlib.suppress(OSError):  # a container that failed before: nothing to map
        if os.read(unshared_r, 1) == b"u":
            write_maps(pid)
            os.write(mapped_w, b"m")
    os.close(unshared_r)
    os.close(mapped_w)
    _, status = os.waitpid(pid, 0)
    if store is not None:
        os.kill(store, signal.SIGKILL)
        os.waitpid(store, 0)
    if cgroup is not None:
        if cgroup.oom_killed():
            with contextlib.suppress(OSError):
                Path(pod.termination_log).write_text(
                    f"OOMKilled: the pod went over its memory limit ({pod.memory_limit} bytes)"
                )
        cgroup.remove()
    code = exit_record.code_of(status)
    if pod.exit_record:
        exit_record.write(Path(pod.exit_record), os.getpid(), code)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m operator_client.backends.local.sandbox.shim POD.json", file=sys.stderr
        )
        return 2
    return run(PodSandbox.from_json(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
