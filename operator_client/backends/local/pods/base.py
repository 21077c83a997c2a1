"""The base of the supervisor's pod launchers (process.py's processes, sandbox.py's pod
sandboxes): how a replica is started, faulted and released. Built on by both, it imports
neither, nor the factory (launch.py), so the launchers form no cycle (an import-linter
contract holds it)."""

from __future__ import annotations

import shutil
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from ....contract import KILL
from ....controlplane.lifecycle import ReplicaState
from ....controlplane.pod_plan import JobPlan
from ...types import Fault
from .. import pod_processes
from ..jobdir import JobDir, NetworkFault
from ..sandbox.support import PodsMode

Launch = tuple[list[str], dict[str, str]]


class PodProcess(Protocol):
    """A replica's running process as the supervisor follows it: one it started
    (subprocess.Popen) or one it took over (adoption.AdoptedPod)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class Pods(ABC):
    """The replicas' way of running, for the supervisor."""

    def __init__(self, job: JobDir, plan: JobPlan, mode: PodsMode) -> None:
        self.job, self.plan, self.mode = job, plan, mode
        self.objects = job.objects()  # the Secrets and ConfigMaps given at submit

    @abstractmethod
    def launch(
        self, replica: ReplicaState, env: Mapping[str, str], extra: Mapping[str, str]
    ) -> Launch:
        """The command to start `replica` and that command's environment. `env` is the
        caller's; `extra` goes to every process of the replica."""

    def started(self, pid: int) -> None:  # noqa: B027 - nothing to wait for in a sandbox
        """Called once the replica's process `pid` was started, before the next one."""

    # The job's rendezvous port on this machine (processes share its loopback).
    port: int | None = None

    def where(self, name: str) -> tuple[str | None, str | None]:
        """The replica's address and network namespace (a pod sandbox's; None as a process)."""
        return None, None

    def _known(self, replica: str) -> None:
        names = [pod.name for pod in self.plan.pods]
        if replica not in names:
            raise ValueError(f"no replica {replica!r} (replicas: {', '.join(names)})")

    def fault(self, fault: Fault) -> str:
        """Apply one fault (chaos.py); what was done, for the replica's log. ValueError
        for a fault this way of running cannot apply."""
        self._known(fault.pod)
        if fault.action != KILL:
            raise ValueError(
                f"{fault.action} needs pod sandboxes; this job runs as {self.mode.describe()}"
            )
        pod_processes.kill_all(pod_processes.marker_of(self.job.path, fault.pod), exact=True)
        return fault.describe()

    def due(self) -> list[str]:
        """Replicas whose timed fault is over, healed now (called every round)."""
        return []

    def network_fault(self, name: str) -> NetworkFault | None:
        """The partition or slow-down the replica's pod is under (pod sandboxes only)."""
        return None

    def removed(self, name: str) -> None:
        """The replica's pod is gone (it ended for good, or its operator makes it anew):
        its emptyDirs go with it, as the kubelet removes a pod's volumes; a container
        restarted in place keeps them. As processes: the replica's TMPDIR."""
        shutil.rmtree(self.job.tmp(name), ignore_errors=True)

    def close(self) -> None:  # noqa: B027 - processes hold nothing beyond themselves
        """The job has ended: release what the pods held."""


def bindir() -> Path:
    """Where the installed package's commands are: beside this Python."""
    return Path(sys.executable).parent
