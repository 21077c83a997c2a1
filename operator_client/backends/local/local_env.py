"""What one replica process of a local run gets: the trainer container's command and env
as the kubelet resolves them, plus exactly the variables its operator adds (the
training-operator's or Trainer v2's torch plugin, read from the job's pod plan:
controlplane/pod_plan.py); as plain processes, the names of this job's pods map to
loopback and the rendezvous port is a free one of this machine.

Pure functions; the supervisor starts the processes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...controlplane.pod_env import PodEnvError, resolve_env
from ...controlplane.pod_plan import PodPlan
from ...kubeflow.pod_objects import PodObjects

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
    "JOB_COMPLETION_INDEX",
)
LOOPBACK = "127.0.0.1"
POD_TMP = "/tmp"


# The operator's variables that name the rendezvous host, and its port (operator_env.py,
# trainjob_pods.py); PET_RDZV_ENDPOINT holds both, as host:port.
RENDEZVOUS_HOSTS = ("MASTER_ADDR", "PET_MASTER_ADDR")
RENDEZVOUS_PORTS = ("MASTER_PORT", "PET_MASTER_PORT")
RENDEZVOUS_ENDPOINT = "PET_RDZV_ENDPOINT"


def loopback_for(hosts: frozenset[str]) -> Callable[[str], str]:
    """Map `hosts`, the names of this job's pods, to loopback; other hosts stay as they are."""

    def address(host: str) -> str:
        return LOOPBACK if host in hosts else host

    return address


def on_one_machine(env: Mapping[str, str], hosts: frozenset[str], port: int) -> dict[str, str]:
    """The operator's env of a pod for processes sharing this machine: the names of the
    job's pods (`hosts`) as loopback, `port` as the rendezvous port."""
    address = loopback_for(hosts)
    out = dict(env)
    for key in RENDEZVOUS_HOSTS:
        if key in out:
            out[key] = address(out[key])
    for key in RENDEZVOUS_PORTS:
        if key in out:
            out[key] = str(port)
    if RENDEZVOUS_ENDPOINT in out:
        host = out[RENDEZVOUS_ENDPOINT].rpartition(":")[0]
        out[RENDEZVOUS_ENDPOINT] = f"{address(host)}:{port}"
    return out


# The only Secret keys a local run may take from the caller's environment: the store's
# credentials, standing in for the pod's cloud identity (docs/LOCAL_PODS.md). A job file
# never picks any other variable of the caller's.
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def pod_objects(
    container: Mapping[str, Any], env: Mapping[str, str], given: PodObjects
) -> PodObjects:
    """The Secrets and ConfigMaps the container reads: those given (--secret,
    --configmap); for a Secret not given, only an S3 credential variable named as its key
    (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) from the caller's
    environment. Anything else missing is the kubelet's CreateContainerConfigError."""
    secrets = {name: dict(values) for name, values in given.secrets.items()}
    for item in container.get("env", []):
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None or ref["name"] in given.secrets or ref.get("optional"):
            continue
        key = ref.get("key")
        if key not in CREDENTIAL_KEYS or item.get("name") != key:
            raise PodEnvError(
                f"CreateContainerConfigError: secret {ref['name']!r} not found (give it with "
                "--secret FILE, or mark the reference optional: true)"
            )
        if key not in env:
            raise PodEnvError(
                f"{item['name']}: the job reads key {key!r} of Secret "
                f"{ref['name']!r}; give the Secret with --secret FILE, or set your "
                f"environment variable {key}, which a local run takes it from"
            )
        secrets.setdefault(ref["name"], {})[key] = env[key]
    return PodObjects(secrets, given.configmaps)


def replica_env(
    pod: PodPlan,
    *,
    base: Mapping[str, str],
    hosts: frozenset[str] = frozenset(),
    port: int | None = None,
    tmpdir: Path | None = None,
    pod_ip: str | None = None,
    secrets: Mapping[str, str] | None = None,
    objects: PodObjects | None = None,
) -> dict[str, str]:
    """The environment of one replica's process, the pod `pod` of the job's plan.

    `base` is what the container starts with (as processes: the caller's environment,
    without LEAKY_PREFIXES; in a pod sandbox: the image's, host_view.image_env); the
    Secrets and ConfigMaps it references are `objects`, else Secrets' keys are read from
    `secrets` (default `base`).
    As processes sharing this machine (`port`, no `pod_ip`): `hosts`, the names of the
    job's pods, map to loopback, `port` replaces the rendezvous port, `tmpdir` stands in
    for the pod's own /tmp (TMPDIR, and HOME when the container points HOME there). In a
    pod sandbox (`pod_ip`, its own address): Service names resolve through the sandbox's
    /etc/hosts and /tmp is the pod's own, as on a cluster."""
    inherited = {k: v for k, v in base.items() if not k.startswith(LEAKY_PREFIXES)}
    operator = pod.operator_env if port is None else on_one_machine(pod.operator_env, hosts, port)
    env = {
        **inherited,
        **resolve_env(
            pod.container,
            pod_ip=pod_ip or LOOPBACK,
            objects=pod_objects(
                pod.container, base if secrets is None else secrets, objects or PodObjects()
            ),
            fields=pod.fields,
        ),
        **operator,
    }
    env["HOSTNAME"] = pod.name  # as the container runtime sets it: the pod's hostname
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
        raise PodEnvError(
            f"the {container['name']} container has no command (the image's entrypoint)"
        )
    program = bindir / command[0]
    found = str(program) if program.is_file() else shutil.which(command[0])
    if found is None:
        raise PodEnvError(
            f"{command[0]!r} is not installed here: a local run uses the installed "
            "package instead of the image (pip install 'kctl-train[runtime]')"
        )
    return [found, *command[1:]]
