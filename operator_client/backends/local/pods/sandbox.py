"""Replicas as pod sandboxes, for the supervisor: the job's network (network.py), and per
replica a pod description for the shim (shim.py), which relays a store on this machine's
loopback into its pod (relay.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ....contract import HEAL, KILL, PARTITION, SLOW, ImageRoot
from ....controlplane import lifecycle as lc
from ....controlplane.pod_plan import JobPlan, PodPlan
from ....runstore.location import home
from ...types import Fault, StorageLocation
from .. import file_store
from ..jobdir import JobDir, LocalReplica, NetworkFault
from ..local_env import replica_command, replica_env
from ..sandbox import cgroups, empty_dirs
from ..sandbox.host_view import HostView, host_view, image_env
from ..sandbox.network import PodNetwork
from ..sandbox.podspec import (
    RESOLV_CONF,
    Bind,
    PodSandbox,
    Volume,
    cpu_limit,
    emptydirs,
    ephemeral_limit,
    gpu_devices,
    hosts_file,
    identity,
    memory_limit,
    mounted_volumes,
    seccomp_profile,
)
from ..sandbox.relay import loopback_port
from ..sandbox.support import PodsMode
from ..sandbox.userns import host_id
from .base import Launch, Pods, bindir

SHIM = "operator_client.backends.local.sandbox.shim"


class SandboxPods(Pods):
    def __init__(
        self,
        job: JobDir,
        plan: JobPlan,
        mode: PodsMode,
        image: ImageRoot | None,
        previous: Sequence[LocalReplica] = (),
    ) -> None:
        """`previous`: the replicas of a supervisor whose running pods this one takes
        over (adoption.py): their network is made already, their faults go on."""
        super().__init__(job, plan, mode)
        self.image = image
        names = [pod.name for pod in plan.pods]
        addresses = {r.state.name: r.address or "" for r in previous}
        self.network = (
            PodNetwork.existing(job.path, names, addresses)
            if addresses
            else PodNetwork.make(job.path, names)
        )
        dns_names = {pod.name: pod.dns_names for pod in plan.pods}
        hosts = hosts_file(self.network.addresses(), dns_names)
        self.files = {
            "/etc/hosts": self._file("hosts", hosts),
            "/etc/resolv.conf": self._file("resolv.conf", RESOLV_CONF),
        }
        location = StorageLocation.of(plan.workload.manifest)
        # A store on this machine's loopback: each pod's shim relays it (relay.py).
        self.store_port = loopback_port(location.endpoint) if location else None
        self.store = file_store.roots(location.root) if location else None
        self.s3 = bool(location and location.root.startswith("s3://"))
        # The faults the pods are under go on (their links, netem and store cuts are
        # where the dead supervisor left them); a new network starts with none.
        self.faults = {r.state.name: r.fault for r in previous if r.fault and r.state.name in names}
        if not previous:
            for name in names:
                job.store_cut(name).unlink(missing_ok=True)
        self._host: HostView | None = None

    def _file(self, name: str, text: str) -> str:
        path = self.job.path / name
        with contextlib.suppress(FileNotFoundError):
            if path.read_text() == text:  # shown in running pods (a supervisor took over)
                return str(path)
        path.write_text(text)
        path.chmod(0o644)
        return str(path)

    def _volumes(self, uid: int, gid: int) -> list[Bind]:
        """What the pod writes outside its emptyDirs: its own run directory of a file://
        store (as a cluster pod has its own volume), nothing else of the store."""
        if self.store is None:
            return []
        store, run = self.store
        run_dir = file_store.run_directory(run, store, host_id(uid), host_id(gid))
        return [Bind(str(run_dir), writable=True)]

    def _mounted(self, pod: PodPlan) -> list[Volume]:
        """The container's configMap and secret volumes; the objects' files are written
        afresh for each start, as the kubelet projects them."""
        volumes = []
        for volume in mounted_volumes(pod, self.objects):
            directory = self.job.pod_dir(pod.name) / "volumes" / volume.name
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            directory.chmod(0o755)
            for path, text in volume.files.items():
                target = directory / path  # a relative path without "..": mounted_volumes
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                target.chmod(volume.mode)
            volumes.append(Volume(str(directory), volume.target, read_only=True))
        return volumes

    def _view(self) -> HostView:
        """This machine as the image (no image given): computed once per job."""
        if self._host is None:
            package = Path(__file__).resolve().parents[4]  # where operator_client/ is
            private = [home().resolve(), *(self.store[:1] if self.store else [])]
            self._host = host_view(Path(os.getcwd()), package, private)
        return self._host

    def launch(
        self, replica: lc.ReplicaState, env: Mapping[str, str], extra: Mapping[str, str]
    ) -> Launch:
        planned = self.plan.pod(replica.name)
        uid, gid, read_only = identity(planned)
        container = planned.container
        pod_dir = self.job.pod_dir(replica.name)
        (pod_dir / "root").mkdir(parents=True, exist_ok=True)
        termination = self.job.termination_log(replica.name)
        termination.touch()
        os.chown(termination, host_id(uid), host_id(gid))
        binds = [*self._volumes(uid, gid), Bind(str(termination), writable=True)]
        volumes = self._mounted(planned)
        empty = emptydirs(planned)
        held = empty_dirs.hold(self.job.empty_dirs(replica.name), {e.name: e.size for e in empty})
        address = self.network.address(replica.name)
        # The pod's env is its image's and its manifest's, never the caller's shell.
        identity_needed = self.s3 and not any(
            e.get("name") == "AWS_ACCESS_KEY_ID" for e in container.get("env", [])
        )
        base = image_env(
            env, self.image.env if self.image else None, ambient_identity=identity_needed
        )
        view = None if self.image else self._view()
        if view is None:
            command = [*container.get("command", []), *container.get("args", [])]
            workdir = self.image.workdir if self.image else "/"
        else:
            command = replica_command(container, bindir())
            binds += view.binds
            workdir = os.getcwd()
        pod_env = replica_env(planned, base=base, pod_ip=address, secrets=env, objects=self.objects)
        if view is not None:
            # The working directory plays the image's WORKDIR: its modules are importable.
            pod_env["PYTHONPATH"] = os.getcwd()
        pod_env.update(extra)
        if any("\0" in text for text in [*pod_env, *pod_env.values(), *command]):
            raise ValueError("embedded null byte in the container's env or command")
        pod = PodSandbox(
            pod=replica.name,
            netns=str(self.network.netns_path(replica.name)),
            rootfs=self.image.path if self.image else None,
            stage=str(pod_dir / "root"),
            uid=uid,
            gid=gid,
            read_only_root=read_only,
            empty_dirs=tuple(Volume(str(held[e.name]), e.target, e.read_only) for e in empty),
            binds=tuple(binds),
            files=self.files,
            workdir=workdir,
            memory_limit=memory_limit(planned),
            cgroup_name=self.network.netns(replica.name),
            termination_log=str(termination),
            env=pod_env,
            command=tuple(command),
            links=view.links if view else {},
            hidden=view.hidden if view else (),
            devices=gpu_devices(planned),
            seccomp=seccomp_profile(planned),
            volumes=tuple(volumes),
            cpu_limit=cpu_limit(planned),
            ephemeral_limit=ephemeral_limit(planned, env),
            exit_record=str(self.job.exit_record(replica.name)),
            store_port=self.store_port,
            store_cut=str(self.job.store_cut(replica.name)),
        )
        description = pod_dir / "pod.json"
        description.write_text(pod.to_json())
        description.chmod(0o600)  # it holds the pod's env, secrets included
        # Not the replica's marker: a fault that kills the pod's processes leaves the shim
        # to report the exit and remove the pod's cgroup.
        return [sys.executable, "-m", SHIM, str(description)], {"PATH": env.get("PATH", "")}

    def where(self, name: str) -> tuple[str | None, str | None]:
        return self.network.address(name), self.network.netns(name)

    def fault(self, fault: Fault) -> str:
        if fault.action == KILL:
            return super().fault(fault)
        self._known(fault.pod)
        if fault.action in (PARTITION, HEAL):
            cut = fault.action == PARTITION
            if not cut:
                self.network.heal(fault.pod)
            self.network.partition(fault.pod, cut)
            store_cut = self.job.store_cut(fault.pod)  # the shim's relay reads it
            if cut:
                store_cut.parent.mkdir(parents=True, exist_ok=True)
                store_cut.touch()
            else:
                store_cut.unlink(missing_ok=True)
        elif fault.action == SLOW:
            self.network.slow(fault.pod, fault.delay_ms, fault.loss_percent)
        if fault.action == HEAL:
            self.faults.pop(fault.pod, None)
        else:  # the newest one's timer heals both (heal undoes both)
            heal_at = time.time() + fault.seconds if fault.seconds else None
            self.faults[fault.pod] = NetworkFault(fault, heal_at)
        return fault.describe()

    def due(self) -> list[str]:
        """Replicas whose timed fault is over (healed now)."""
        now = time.time()
        healed = [n for n, f in self.faults.items() if f.heal_at is not None and f.heal_at <= now]
        for name in healed:
            self.fault(Fault(HEAL, name))
        return healed

    def network_fault(self, name: str) -> NetworkFault | None:
        return self.faults.get(name)

    def removed(self, name: str) -> None:
        empty_dirs.release(self.job.empty_dirs(name))

    def close(self) -> None:
        release(self.job, self.network)


def release_job(path: Path, pods: list[str]) -> None:
    """Release what a job's pods held, from its directory and pod names alone (a job whose
    supervisor died)."""
    release(JobDir(path), PodNetwork.of(path, pods))


def release(job: JobDir, network: PodNetwork) -> None:
    """Remove a job's network, its pods' cgroups and emptyDirs (a shim killed with its
    pod leaves its cgroup; a killed supervisor leaves everything)."""
    network.destroy()
    for name in network.pods:
        cgroups.discard(network.netns(name))
        empty_dirs.release(job.empty_dirs(name))
