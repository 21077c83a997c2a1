"""What one replica process of a local run gets: the `pytorch` container's command and env
as the kubelet resolves them, plus exactly the variables the training-operator adds
(kubeflow/operator_env.py); as plain processes, this job's Service hostnames map to
loopback.

Pure functions; the supervisor starts the processes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...kubeflow import pytorchjob as pj
from ...kubeflow.lifecycle import Replica
from ...kubeflow.operator_env import operator_env
from ...kubeflow.pod_env import PodEnvError, resolve_env

# Variables of the caller's shell that would confuse a replica's torchrun or runtime:
# on a cluster the pod starts with none of them.
LEAKY_PREFIXES = (
    "PET_",
    "TORCHELASTIC_",
    "KCTL_TRAIN_",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
)
LOOPBACK = "127.0.0.1"
POD_TMP = "/tmp"


def container_of(manifest: Mapping[str, Any], replica_type: str) -> Mapping[str, Any]:
    """The `pytorch` container of one replica type."""
    template = manifest["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
    for container in template["spec"]["containers"]:
        if container["name"] == pj.CONTAINER_NAME:
            return dict(container)
    raise PodEnvError(f"{replica_type}: no container named {pj.CONTAINER_NAME!r}")


def loopback_for(job_name: str) -> Callable[[str], str]:
    """Map this job's per-replica Service names to loopback; other hosts stay as they are."""
    prefix = f"{job_name}-"

    def address(host: str) -> str:
        rest = host.removeprefix(prefix)
        role, _, index = rest.rpartition("-")
        if host.startswith(prefix) and role in ("master", "worker") and index.isdigit():
            return LOOPBACK
        return host

    return address


def secrets_from_env(
    container: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """Stand-ins for the Secrets the container references: each key is read from the
    caller's variable of the same name (AWS_ACCESS_KEY_ID and friends)."""
    secrets: dict[str, dict[str, str]] = {}
    for item in container.get("env", []):
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is None:
            continue
        if ref["key"] not in env:
            raise PodEnvError(
                f"{item['name']}: the job reads key {ref['key']!r} of Secret "
                f"{ref['name']!r}; a local run takes it from your environment variable "
                f"{ref['key']}, which is not set"
            )
        secrets.setdefault(ref["name"], {})[ref["key"]] = env[ref["key"]]
    return secrets


def replica_env(
    manifest: Mapping[str, Any],
    replica: Replica,
    *,
    base: Mapping[str, str],
    port: int | None = None,
    tmpdir: Path | None = None,
    pod_ip: str | None = None,
) -> dict[str, str]:
    """The environment of one replica's process.

    `base` is the caller's environment (PATH, the virtualenv) without LEAKY_PREFIXES.
    As processes sharing this machine (no `pod_ip`): Service names map to loopback,
    `port` replaces the rendezvous port, `tmpdir` stands in for the pod's own /tmp
    (TMPDIR, and HOME when the container points HOME there). In a pod sandbox
    (`pod_ip`, its own address): Service names resolve through the sandbox's
    /etc/hosts and /tmp is the pod's own, as on a cluster."""
    container = container_of(manifest, replica.type)
    inherited = {k: v for k, v in base.items() if not k.startswith(LEAKY_PREFIXES)}
    sandboxed = pod_ip is not None
    address = str if sandboxed else loopback_for(manifest["metadata"]["name"])
    env = {
        **inherited,
        **resolve_env(
            container, pod_ip=pod_ip or LOOPBACK, secrets=secrets_from_env(container, base)
        ),
        **operator_env(manifest, replica.type, replica.index, address=address, port=port),
    }
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
        if env.get("HOME") == POD_TMP:
            env["HOME"] = str(tmpdir)
    return env


def replica_command(container: Mapping[str, Any], bindir: Path) -> list[str]:
    """The container's command and args, the program found beside this Python (the
    installed package stands in for the image) or on PATH."""
    command = [*container.get("command", []), *container.get("args", [])]
    if not command:
        raise PodEnvError("the pytorch container has no command (the image's entrypoint)")
    program = bindir / command[0]
    found = str(program) if program.is_file() else shutil.which(command[0])
    if found is None:
        raise PodEnvError(
            f"{command[0]!r} is not installed here: a local run uses the installed "
            "package instead of the image (pip install 'kctl-train[runtime]')"
        )
    return [found, *command[1:]]
