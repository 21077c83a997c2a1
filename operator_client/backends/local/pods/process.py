"""Replicas as processes of this machine, for the supervisor: where pod sandboxes cannot
run (not root, no iproute2, an S3 endpoint off this machine) or are not wanted
(KCTL_TRAIN_LOCAL_PODS=process)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

from ....controlplane.lifecycle import ReplicaState
from ....controlplane.pod_plan import JobPlan
from ..jobdir import JobDir
from ..local_env import LOOPBACK, replica_command, replica_env
from ..sandbox.support import PodsMode
from .base import Launch, Pods, bindir

KEEPER = "operator_client.backends.local.pods.keeper"


def free_port() -> int:
    """A port nothing listens on now: the job's rendezvous port."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class ProcessPods(Pods):
    """Replicas as processes of this machine: one loopback (a free rendezvous port, the
    Service names mapped to 127.0.0.1), a private TMPDIR each, the caller's user."""

    def __init__(self, job: JobDir, plan: JobPlan, mode: PodsMode, port: int | None = None) -> None:
        """`port`: the rendezvous port of the replicas a supervisor takes over."""
        super().__init__(job, plan, mode)
        self.port = port or free_port()

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
        # Its keeper records its exit for a supervisor that takes the job over.
        record = str(self.job.exit_record(replica.name))
        return [sys.executable, "-m", KEEPER, record, "--", *command], full


def host_pythonpath(env: Mapping[str, str]) -> str:
    return os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
