"""Run a rendered PyTorchJob's replicas as plain local processes, for runtime tests that
need to reach into them (kill one worker, signal one agent). The environment and command
are the local backend's own (operator_client.backends.local.local_env); the backend's
supervisor and lifecycle rules are tested in test_local_backend.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operator_client.backends.local.local_env import replica_command, replica_env
from operator_client.backends.local.pods.process import free_port
from operator_client.controlplane import lifecycle
from operator_client.controlplane.lifecycle import replicas_of
from operator_client.controlplane.pod_plan import plan_of


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


# A Lightning worker is forked from its agent (runtime/main.py): its command line is the
# agent's, the runtime's entry point.
RUNTIME = b"kctl-train-runtime"

# Rewrites a replica's environment (replica, env, rendezvous port): another operator's
# variables in place of the training-operator's.
EnvRewrite = Callable[[lifecycle.ReplicaState, dict[str, str], int], dict[str, str]]


@dataclass(frozen=True)
class Launch:
    """How one replica is started: its command and environment, where it logs."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path

    def popen(self, extra: dict[str, str] | None = None, mode: str = "wb") -> Any:
        with self.log.open(mode) as out:
            return subprocess.Popen(
                self.command,
                env={**self.env, **(extra or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def launches(
    manifest: dict[str, Any],
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    rewrite: EnvRewrite | None = None,
) -> list[Launch]:
    """Each replica's command and environment, the local backend's own."""
    port = free_port()
    bindir = Path(sys.executable).parent
    found = []
    plan = plan_of(manifest)
    for replica in replicas_of(plan.workload):
        tmp = workdir / replica.name
        tmp.mkdir(parents=True, exist_ok=True)
        pod = plan.pod(replica.name)
        env = {
            **replica_env(pod, hosts=plan.hosts, port=port, base=os.environ, tmpdir=tmp),
            **(extra_env or {}),
        }
        if rewrite is not None:
            env = rewrite(replica, env, port)
        command = replica_command(pod.container, bindir)
        found.append(Launch(replica.name, command, env, workdir / f"{replica.name}.log"))
    return found


def start(
    manifest: dict[str, Any],
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    rewrite: EnvRewrite | None = None,
) -> list[Replica]:
    return [
        Replica(launch.name, launch.popen(), launch.log)
        for launch in launches(manifest, workdir, extra_env, rewrite)
    ]


def wait(replicas: list[Replica], timeout: float = 180) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [r.process.wait(max(1.0, deadline - time.monotonic())) for r in replicas]
    except subprocess.TimeoutExpired:
        logs = "\n".join(f"--- {r.name}\n{r.text()[-3000:]}" for r in replicas)
        raise AssertionError(f"replicas still running after {timeout}s\n{logs}") from None
    finally:
        for r in replicas:
            if r.process.poll() is None:
                os.killpg(r.process.pid, signal.SIGKILL)
                r.process.wait()


def processes() -> dict[int, tuple[int, bytes]]:
    """Every process of this machine: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry.name)] = (int(stat[1]), (entry / "cmdline").read_bytes())
            except (OSError, IndexError):
                continue
    return found


def is_worker(pid: int, table: dict[int, tuple[int, bytes]]) -> bool:
    """Whether `pid` (in a processes() table) is a torchrun worker: a fork of the
    runtime's agent, so a child with its parent's command line."""
    parent, command = table[pid]
    return RUNTIME in command and parent in table and table[parent][1] == command


def worker_pids(replica: Replica) -> list[int]:
    """PIDs of the torchrun worker processes under one replica's agent."""
    table = processes()
    return [
        pid
        for pid, (parent, _) in table.items()
        if parent == replica.process.pid and is_worker(pid, table)
    ]
