"""Run a rendered PyTorchJob's replicas as local processes with the operator's environment.

A test fixture (the product's local backend comes later): each replica runs the `pytorch`
container's command with its env resolved as the kubelet would and the variables the
training-operator adds, Service hostnames mapped to loopback and a free port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operator_client.kubeflow import pytorchjob as pj
from operator_client.kubeflow.operator_env import operator_env
from operator_client.kubeflow.pod_env import resolve_env

# Variables of the test process that must not leak into a replica.
_LEAKY = ("PET_", "TORCHELASTIC_", "KCTL_TRAIN_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start(
    manifest: dict[str, Any],
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    secrets: dict[str, dict[str, str]] | None = None,
) -> list[Replica]:
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY)}
    bindir = Path(sys.executable).parent
    replicas = []
    for rtype, rspec in manifest["spec"]["pytorchReplicaSpecs"].items():
        for index in range(int(rspec["replicas"])):
            name = pj.pod_name(manifest["metadata"]["name"], rtype, index)
            (container,) = rspec["template"]["spec"]["containers"]
            env = {
                **base,
                **resolve_env(container, pod_ip="127.0.0.1", secrets=secrets or {}),
                **operator_env(manifest, rtype, index, address=lambda h: "127.0.0.1", port=port),
                "HOME": str(workdir),
                "KCTL_TRAIN_SCRATCH": str(workdir / name),
                **(extra_env or {}),
            }
            command = [str(bindir / container["command"][0]), *container["command"][1:]]
            log = workdir / f"{name}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            replicas.append(Replica(name, process, log))
    return replicas


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


def worker_pids(replica: Replica) -> list[int]:
    """PIDs of the torchrun worker processes under one replica's agent."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"operator_client.runtime.worker" in cmdline and int(stat[1]) == replica.process.pid:
            pids.append(int(entry.name))
    return pids
