"""How the supervisor starts a replica: as a plain process sharing this machine, or as a
pod sandbox (sandbox/). Each job's way is chosen when it is submitted (pods.json in its
directory) and shown in its status."""

from __future__ import annotations

import json
import os
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from ...contract import KILL
from ...kubeflow import lifecycle as lc
from ...kubeflow.lifecycle import Replica
from ...kubeflow.workload import Workload
from ..base import Fault, ImageRoot
from . import pod_processes
from .jobdir import JobDir, write_json
from .local_env import LOOPBACK, replica_command, replica_env
from .sandbox.support import PROCESS, PodsMode

Launch = tuple[list[str], dict[str, str]]


def save_mode(job: JobDir, mode: PodsMode, image: ImageRoot | None) -> None:
    write_json(job.pods_file, {**asdict(mode), "image": asdict(image) if image else None})


def load_mode(job: JobDir) -> tuple[PodsMode, ImageRoot | None]:
    try:
        raw = json.loads(job.pods_file.read_text())
    except FileNotFoundError:  # started by a kctl-train before pod sandboxes
        return PodsMode(PROCESS, "started before pod sandboxes", "not enforced"), None
    image = raw.pop("image", None)
    return PodsMode(**raw), ImageRoot(**image) if image else None


class Pods(ABC):
    """The replicas' way of running, for the supervisor."""

    def __init__(self, job: JobDir, workload: Workload, mode: PodsMode) -> None:
        self.job, self.workload, self.mode = job, workload, mode
        self.objects = job.objects()  # the Secrets and ConfigMaps given at submit

    @abstractmethod
    def launch(self, replica: Replica, env: Mapping[str, str], extra: Mapping[str, str]) -> Launch:
        """The command to start `replica` and that command's environment. `env` is the
        caller's; `extra` goes to every process of the replica."""

    # The job's rendezvous port on this machine (processes share its loopback).
    port: int | None = None

    def where(self, name: str) -> tuple[str | None, str | None]:
        """The replica's address and network namespace (a pod sandbox's; None as a process)."""
        return None, None

    def _known(self, replica: str) -> None:
        names = [r.name for r in lc.replicas_of(self.workload)]
        if replica not in names:
            raise ValueError(f"no replica {replica!r} (replicas: {', '.join(names)})")

    def fault(self, fault: Fault) -> str:
        """Apply one fault (chaos.py); what was done, for the replica's log. ValueError
        for a fault this way of running cannot apply."""
        self._known(fault.replica)
        if fault.action != KILL:
            raise ValueError(
                f"{fault.action} needs pod sandboxes; this job runs as {self.mode.describe()}"
            )
        pod_processes.kill_all(pod_processes.marker_of(self.job.path, fault.replica), exact=True)
        return fault.describe()

    def due(self) -> list[str]:
        """Replicas whose timed fault is over, healed now (called every round)."""
        return []

    def close(self) -> None:  # noqa: B027 - processes hold nothing beyond themselves
        """The job has ended: release what the pods held."""


def free_port() -> int:
    """A port nothing listens on now: the job's rendezvous port."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class ProcessPods(Pods):
    """Replicas as processes of this machine: one loopback (a free rendezvous port, the
    Service names mapped to 127.0.0.1), a private TMPDIR each, the caller's user."""

    def __init__(self, job: JobDir, workload: Workload, mode: PodsMode) -> None:
        super().__init__(job, workload, mode)
        self.port = free_port()

    def launch(self, replica: Replica, env: Mapping[str, str], extra: Mapping[str, str]) -> Launch:
        tmp = self.job.tmp(replica.name)
        tmp.mkdir(parents=True, exist_ok=True)
        full = replica_env(
            self.workload, replica, port=self.port, base=env, tmpdir=tmp, objects=self.objects
        )
        full.update(extra)
        # The caller's directory plays the image's WORKDIR: its modules are importable.
        full["PYTHONPATH"] = host_pythonpath(env)
        command = replica_command(self.workload.container(replica.type), bindir())
        return command, full


def bindir() -> Path:
    """Where the installed package's commands are: beside this Python."""
    return Path(sys.executable).parent


def host_pythonpath(env: Mapping[str, str]) -> str:
    return os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)


def pods_for(job: JobDir, workload: Workload) -> Pods:
    """The job's way of running, as submitted."""
    mode, image = load_mode(job)
    if not mode.sandboxed:
        return ProcessPods(job, workload, mode)
    from .sandbox.pods import SandboxPods

    return SandboxPods(job, workload, mode, image)
