"""Replicas as processes of this machine, for the supervisor: where pod sandboxes cannot
run (not root, no iproute2, an S3 endpoint off this machine) or are not wanted
(KCTL_TRAIN_LOCAL_PODS=process)."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ....controlplane.lifecycle import ReplicaState
from ....controlplane.pod_plan import JobPlan
from ..jobdir import JobDir
from ..local_env import LOOPBACK, replica_command, replica_env
from ..sandbox.support import PodsMode
from .base import Launch, Pods, bindir

KEEPER = "operator_client.backends.local.pods.keeper"
# How long a keeper may take to start its replica before the next replica starts anyway.
KEEPER_START_SECONDS = 5.0


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

    def started(self, pid: int) -> None:
        """Wait until the keeper `pid` has started its replica. torch's rendezvous ranks
        nodes of one address (here all are 127.0.0.1) by their agents' PIDs: replicas
        started in order get PIDs in order, so master-0 (node-0-0) is rank 0 as the
        pod sandboxes' addresses make it, not whichever keeper's Python came up first."""
        children = Path(f"/proc/{pid}/task/{pid}/children")
        deadline = time.monotonic() + KEEPER_START_SECONDS
        while time.monotonic() < deadline:
            try:
                if children.read_text().strip():
                    return
            except OSError:  # it ended (it could not start the replica), or no such file
                return
            time.sleep(0.005)


def host_pythonpath(env: Mapping[str, str]) -> str:
    return os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
