"""Replicas as pod sandboxes, for the supervisor: the job's network (network.py), its store
relayed in (relay.py), and per replica a pod description for the shim (shim.py)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ....contract import HEAL, KILL, PARTITION, SLOW
from ....kubeflow import lifecycle as lc
from ....kubeflow.workload import Workload
from ...base import Fault, ImageRoot, StorageLocation
from ..jobdir import JobDir
from ..launch import Launch, Pods, bindir, host_pythonpath
from ..local_env import replica_command, replica_env
from . import cgroups
from .network import PodNetwork
from .podspec import (
    RESOLV_CONF,
    Bind,
    PodSandbox,
    emptydirs,
    hosts_file,
    identity,
    memory_limit,
)
from .relay import LoopbackRelay, loopback_port
from .support import PodsMode

SHIM = "operator_client.backends.local.sandbox.shim"
CALLER_IDENTITY = ("USER", "LOGNAME", "USERNAME", "LNAME", "MAIL", "SUDO_USER", "SUDO_UID")


def file_store_path(root: str) -> Path | None:
    """The directory of a file:// run root (None for any other store)."""
    parts = urlsplit(root)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give the pod's user a volume it writes, as the kubelet does with fsGroup."""
    os.chown(path, uid, gid)
    for parent, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(parent, name), uid, gid)


class SandboxPods(Pods):
    def __init__(
        self, job: JobDir, workload: Workload, mode: PodsMode, image: ImageRoot | None
    ) -> None:
        super().__init__(job, workload, mode)
        self.image = image
        names = [r.name for r in lc.replicas_of(workload)]
        self.network = PodNetwork.make(job.path, names)
        hosts = hosts_file(self.network.addresses(), workload.dns_names)
        self.files = {
            "/etc/hosts": self._file("hosts", hosts),
            "/etc/resolv.conf": self._file("resolv.conf", RESOLV_CONF),
        }
        location = StorageLocation.of(workload.manifest)
        port = loopback_port(location.endpoint) if location else None
        self.relay = (
            LoopbackRelay(port, [self.network.netns_path(n) for n in names]) if port else None
        )
        self.store = file_store_path(location.root) if location else None
        self.heal_at: dict[str, float] = {}
        self._owned = False

    def _file(self, name: str, text: str) -> str:
        path = self.job.path / name
        path.write_text(text)
        path.chmod(0o644)
        return str(path)

    def _volumes(self, uid: int, gid: int) -> list[Bind]:
        """What the pod writes outside its emptyDirs: a file:// store (a shared volume)."""
        if self.store is None:
            return []
        if not self._owned:
            self.store.mkdir(parents=True, exist_ok=True)
            chown_tree(self.store, uid, gid)
            self._owned = True
        return [Bind(str(self.store), writable=True)]

    def _host_image(self) -> list[Bind]:
        """This machine's root as the image: the Python, the package and the caller's
        directory (the image's WORKDIR) are shown read-only where they are."""
        package = Path(__file__).resolve().parents[4]  # where operator_client/ is
        paths = {sys.prefix, sys.base_prefix, os.getcwd(), str(package)}
        return [Bind(p) for p in sorted(paths)]

    def launch(
        self, replica: lc.Replica, env: Mapping[str, str], extra: Mapping[str, str]
    ) -> Launch:
        uid, gid, read_only = identity(self.workload, replica.type)
        container = self.workload.container(replica.type)
        pod_dir = self.job.pod_dir(replica.name)
        (pod_dir / "root").mkdir(parents=True, exist_ok=True)
        termination = self.job.termination_log(replica.name)
        termination.touch()
        os.chown(termination, uid, gid)
        binds = [*self._volumes(uid, gid), Bind(str(termination), writable=True)]
        address = self.network.address(replica.name)
        if self.image is None:
            # The caller's environment, but not who the caller is: the pod has its own user.
            base: Mapping[str, str] = {k: v for k, v in env.items() if k not in CALLER_IDENTITY}
            command = replica_command(container, bindir())
            binds += self._host_image()
            workdir = os.getcwd()
        else:
            base = self.image.env
            command = [*container.get("command", []), *container.get("args", [])]
            workdir = self.image.workdir
        pod_env = replica_env(self.workload, replica, base=base, pod_ip=address)
        if self.image is None:
            pod_env["PYTHONPATH"] = host_pythonpath(env)
            # The image's PATH starts with its Python: here, the one running kctl-train.
            pod_env["PATH"] = os.pathsep.join(p for p in (str(bindir()), env.get("PATH")) if p)
        pod_env.update(extra)
        if any("\0" in text for text in [*pod_env, *pod_env.values(), *command]):
            raise ValueError("embedded null byte in the container's env or command")
        pod = PodSandbox(
            pod=replica.name,
            netns=str(self.network.netns_path(replica.name)),
            rootfs=self.image.path if self.image else "/",
            stage=str(pod_dir / "root"),
            uid=uid,
            gid=gid,
            read_only_root=read_only,
            tmpfs=emptydirs(self.workload, replica.type),
            binds=tuple(binds),
            files=self.files,
            workdir=workdir,
            memory_limit=memory_limit(self.workload, replica.type),
            cgroup_name=self.network.netns(replica.name),
            termination_log=str(termination),
            env=pod_env,
            command=tuple(command),
        )
        description = pod_dir / "pod.json"
        description.write_text(pod.to_json())
        description.chmod(0o600)  # it holds the pod's env, secrets included
        # Not the replica's marker: a fault that kills the pod's processes leaves the shim
        # to report the exit and remove the pod's cgroup.
        return [sys.executable, "-m", SHIM, str(description)], {"PATH": env.get("PATH", "")}

    def replica_status(self, name: str) -> dict[str, Any]:
        return {"address": self.network.address(name), "netns": self.network.netns(name)}

    def fault(self, fault: Fault) -> str:
        if fault.action == KILL:
            return super().fault(fault)
        self._known(fault.replica)
        if fault.action in (PARTITION, HEAL):
            cut = fault.action == PARTITION
            if not cut:
                self.network.heal(fault.replica)
            self.network.partition(fault.replica, cut)
            if self.relay is not None:
                self.relay.partition(self.network.netns_path(fault.replica), cut)
        elif fault.action == SLOW:
            self.network.slow(fault.replica, fault.delay_ms, fault.loss_percent)
        if fault.action in (PARTITION, SLOW) and fault.seconds:
            self.heal_at[fault.replica] = time.monotonic() + fault.seconds
        elif fault.action == HEAL:
            self.heal_at.pop(fault.replica, None)
        return fault.describe()

    def due(self) -> list[str]:
        """Replicas whose timed fault is over (healed now)."""
        now = time.monotonic()
        healed = [name for name, at in self.heal_at.items() if at <= now]
        for name in healed:
            self.fault(Fault(HEAL, name))
        return healed

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        release(self.network)


def release(network: PodNetwork) -> None:
    """Remove a job's network and its pods' cgroups (a shim killed with its pod leaves
    its cgroup; a killed supervisor leaves everything)."""
    network.destroy()
    for name in network.pods:
        cgroups.discard(network.netns(name))
