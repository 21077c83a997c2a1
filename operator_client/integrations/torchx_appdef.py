"""TorchX AppDef -> TrainingJob document: pure, so it is testable without TorchX.

TorchX's `dist.ddp` component wraps the user's script in `bash -c "torchrun ... script"`.
kctl-train's runtime is already the torchrun agent (with the operator's rendezvous), so the
torchrun options are read for what they mean (processes per node) and the script becomes
the job's `command`; any other entrypoint runs as the command itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# torchrun's options that take a value (all others are flags).
_TORCHRUN_FLAGS = {"standalone", "module", "no_python", "run_path"}
_TORCHRUN_VALUES = {
    "nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf",
    "max_restarts", "monitor_interval", "start_method", "role", "tee", "redirects",
    "log_dir", "local_addr", "node_rank", "master_addr", "master_port", "logs_specs",
    "local_ranks_filter",
}  # fmt: skip


class AppDefError(ValueError):
    """The app cannot be a kctl-train job; the message says why."""


@dataclass(frozen=True)
class RoleSpec:
    """The parts of a TorchX Role that a TrainingJob can express."""

    name: str
    image: str
    entrypoint: str
    args: Sequence[str]
    num_replicas: int = 1
    min_replicas: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: int = -1
    gpu: int = -1
    mem_mb: int = -1
    max_retries: int = 0
    mounts: Sequence[Any] = ()


@dataclass(frozen=True)
class Launch:
    command: list[str]
    nproc_per_node: int | None = None


def parse_torchrun(tokens: Sequence[str]) -> Launch:
    """`torchrun [options] script args` (or `-m module args`) -> the command to run."""
    module = no_python = False
    nproc: int | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("-m", "--module"):
            module = True
        elif token.startswith("--"):
            name, _, inline = token[2:].partition("=")
            name = name.replace("-", "_")
            if name in _TORCHRUN_FLAGS:
                no_python |= name == "no_python"
                module |= name == "module"
            elif name in _TORCHRUN_VALUES:
                value = inline if inline else (tokens[i + 1] if i + 1 < len(tokens) else "")
                i += 0 if inline else 1
                if name == "nproc_per_node" and value.isdigit():
                    nproc = int(value)
            else:
                raise AppDefError(f"torchrun option --{name} is not known to kctl-train")
        else:
            script, rest = token, list(tokens[i + 1 :])
            if module:
                return Launch(["python", "-m", script, *rest], nproc)
            return Launch([script, *rest] if no_python else ["python", script, *rest], nproc)
        i += 1
    raise AppDefError("the torchrun command names no script or module")


def launch_of(role: RoleSpec) -> Launch:
    """What the role runs, with torchrun's own options taken out."""
    args = list(role.args)
    if role.entrypoint in ("bash", "sh", "/bin/bash", "/bin/sh") and args[:1] == ["-c"]:
        tokens = shlex.split(args[1]) if len(args) > 1 else []
        if tokens[:1] == ["torchrun"]:
            return parse_torchrun(tokens[1:])
        return Launch([role.entrypoint, *args])
    if role.entrypoint in ("torchrun", "python -m torch.distributed.run"):
        return parse_torchrun(args)
    return Launch([role.entrypoint, *args])


def job_name(app_name: str) -> str:
    """A DNS-1035 name from a TorchX run name (`train-abc123` stays as it is)."""
    name = re.sub(r"[^a-z0-9-]+", "-", app_name.lower()).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:40].rstrip("-")
    if not name:
        raise AppDefError(f"app name {app_name!r} has no letters to make a job name from")
    return name


def job_document(
    app_name: str, roles: Sequence[RoleSpec], cfg: Mapping[str, Any]
) -> dict[str, Any]:
    """The TrainingJob (as job.yaml data) for a one-role TorchX app and the run options."""
    if len(roles) != 1:
        raise AppDefError(
            f"the app has {len(roles)} roles; a kctl-train job is one role of identical "
            "nodes (one PyTorchJob)"
        )
    (role,) = roles
    if role.mounts:
        raise AppDefError(
            "kctl-train jobs mount no volumes (role mounts: "
            f"{', '.join(str(m) for m in role.mounts)}); read data from the object store"
        )
    launch = launch_of(role)
    spec: dict[str, Any] = {"image": role.image, "command": launch.command}
    if role.min_replicas is not None and role.min_replicas < role.num_replicas:
        spec["nodes"] = {"min": max(1, role.min_replicas), "max": role.num_replicas}
    else:
        spec["nodes"] = role.num_replicas
    if launch.nproc_per_node is not None:
        spec["processesPerNode"] = launch.nproc_per_node
    resources: dict[str, Any] = {}
    if role.cpu > 0:
        resources["cpu"] = str(role.cpu)
    if role.mem_mb > 0:
        resources["memory"] = f"{role.mem_mb}Mi"
    if role.gpu > 0:
        resources["gpus"] = role.gpu
    if resources:
        spec["resources"] = resources
    if role.env:
        spec["env"] = dict(role.env)
    if role.max_retries:
        spec["fault"] = {"backoffLimit": role.max_retries}
    if cfg.get("storage"):
        storage = {"uri": cfg["storage"]}
        for key, opt in (
            ("endpoint", "storage_endpoint"),
            ("credentialsSecret", "credentials_secret"),
        ):
            if cfg.get(opt):
                storage[key] = cfg[opt]
        spec["storage"] = storage
    if cfg.get("queue"):
        spec["scheduling"] = {"queue": cfg["queue"]}
    return {
        "apiVersion": "kctl-train/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": job_name(app_name), "namespace": cfg.get("namespace") or "default"},
        "spec": spec,
    }


def app_id(namespace: str, name: str, cfg: Mapping[str, Any]) -> str:
    """`namespace:name`, then the context and kubeconfig it was scheduled with (when
    given), so that status, logs and cancel in another process reach the same cluster."""
    context, kubeconfig = cfg.get("context") or "", cfg.get("kubeconfig") or ""
    parts = [namespace, name] + (
        [context, kubeconfig] if kubeconfig else [context] if context else []
    )
    return ":".join(parts)


def parse_app_id(value: str) -> tuple[str, str, dict[str, str | None]]:
    """(namespace, name, the context and kubeconfig) of an app id."""
    namespace, name, context, kubeconfig = [*value.split(":", 3), "", ""][:4]
    return namespace, name, {"context": context or None, "kubeconfig": kubeconfig or None}
