"""How the supervisor starts a job's replicas: as plain processes sharing this machine
(process.py) or as pod sandboxes (sandbox.py, on the Linux mechanisms of ../sandbox/). Each
job's way is chosen when it is submitted (pods.json in its directory) and shown in its
status; `pods_for` is the one factory of the launchers (base.py is their base)."""

from __future__ import annotations

import json
from dataclasses import asdict

from ....contract import ImageRoot
from ....controlplane.pod_plan import JobPlan
from ..jobdir import JobDir, LocalStatus, write_json
from ..sandbox.support import PROCESS, PodsMode
from .base import Pods
from .process import ProcessPods


def save_mode(job: JobDir, mode: PodsMode, image: ImageRoot | None) -> None:
    write_json(job.pods_file, {**asdict(mode), "image": asdict(image) if image else None})


def load_mode(job: JobDir) -> tuple[PodsMode, ImageRoot | None]:
    try:
        raw = json.loads(job.pods_file.read_text())
    except FileNotFoundError:  # started by a kctl-train before pod sandboxes
        return PodsMode(PROCESS, "started before pod sandboxes", "not enforced"), None
    image = raw.pop("image", None)
    return PodsMode(**raw), ImageRoot(**image) if image else None


def pods_for(job: JobDir, plan: JobPlan, previous: LocalStatus | None = None) -> Pods:
    """The job's way of running, as submitted. `previous`: the status a dead supervisor
    left, where a new one takes over its running replicas (their rendezvous port or
    network is made already, and a network fault goes on)."""
    mode, image = load_mode(job)
    if not mode.sandboxed:
        return ProcessPods(job, plan, mode, previous.port if previous else None)
    from .sandbox import SandboxPods

    return SandboxPods(job, plan, mode, image, previous.replicas if previous else ())
