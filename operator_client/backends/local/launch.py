"""How the supervisor starts a replica: as a plain process sharing this machine, or as a
pod sandbox (sandbox/). Each job's way is chosen when it is submitted (pods.json in its
directory) and shown in its status; `pods_for` is the one factory of the launchers
(pods_base.py is their base, which the sandboxes build on)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import asdict

from ...contract import ImageRoot
from ...controlplane.lifecycle import ReplicaState
from ...controlplane.pod_plan import JobPlan
from .jobdir import JobDir, write_json
from .local_env import LOOPBACK, replica_command, replica_env
from .pods_base import Launch, Pods, bindir
from .sandbox.support import PROCESS, PodsMode


def save_mode(job: JobDir, mode: PodsMode, image: ImageRoot | None) -> None:
    write_json(job.pods_file, {**asdict(mode), "image": asdict(image) if image else None})


def load_mode(job: JobDir) -> tuple[PodsMode, ImageRoot | None]:
    try:
        raw = json.loads(job.pods_file.read_text())
    except FileNotFoundError:  # started by a kctl-train before pod sandboxes
        return PodsMode(PROCESS, "started before pod sandboxes", "not enforced"), None
    image = raw.pop("image", None)
    return PodsMode(**raw), ImageRoot(**image) if image else None


def free_port() -> int:
    """A port nothing listens on now: the job's rendezvous port."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class ProcessPods(Pods):
    """Replicas as processes of this machine: one loopback (a free rendezvous port, the
    Service names mapped to 127.0.0.1), a private TMPDIR each, the caller's user."""

    def __init__(self, job: JobDir, plan: JobPlan, mode: PodsMode) -> None:
        super().__init__(job, plan, mode)
        self.port = free_port()

    def launch(
        self, replica: ReplicaState, env: Mapping[str, str], extra: Mapping[str, str]
    ) -> Launch:
        tmp = self.job.tmp(replica.name)
        tmp.mkdir(parents=True, exist_ok=True)
        pod = self.plan.pod(replica.name)
        full = replica_env(
            pod,
            hosts=self.plan.hosts,
            port=self.port,
            base=env,
            tmpdir=tmp,
            objects=self.objects,
        )
        full.update(extra)
        # The caller's directory plays the image's WORKDIR: its modules are importable.
        full["PYTHONPATH"] = host_pythonpath(env)
        command = replica_command(pod.container, bindir())
        return command, full


def host_pythonpath(env: Mapping[str, str]) -> str:
    return os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)


def pods_for(job: JobDir, plan: JobPlan) -> Pods:
    """The job's way of running, as submitted."""
    mode, image = load_mode(job)
    if not mode.sandboxed:
        return ProcessPods(job, plan, mode)
    from .sandbox.pods import SandboxPods

    return SandboxPods(job, plan, mode, image)
