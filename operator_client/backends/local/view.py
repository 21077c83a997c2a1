"""A local job as a JobView, from its directory's files (jobdir.py): the supervisor's
status and the replicas it ran, or before it writes one, the workload's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...controlplane import lifecycle as lc
from ...controlplane.workload import Workload
from ...kubeflow.kinds import Kind, kind_of
from ..types import JobView, Replica, StorageLocation
from ..views import conditions_of, replica_count
from .jobdir import JobDir, LocalReplica
from .pods.launch import load_mode


def view_of(
    job: JobDir,
    backend: str,
    manifest: Mapping[str, Any] | None = None,
    runs_as: str | None = None,
    workload: Workload | None = None,
) -> JobView:
    """The job from its files; `manifest`, `runs_as` and `workload` when the caller has
    them (they never change for a job directory: watch and logs read them once)."""
    manifest = manifest or job.manifest()
    workload = workload or job.workload(manifest)
    if runs_as is None:
        runs_as = load_mode(job)[0].describe() if job.pods_file.is_file() else ""
    body = job.status()
    broken: str | None = None
    try:
        local = job.local_status(body)
    except ValueError as exc:
        local, broken = None, f"its status file is not one a supervisor writes ({exc})"
    name, kind = manifest["metadata"]["name"], kind_of(manifest)
    conditions = conditions_of(body)
    # The supervisor's state machine says it for every kind (a TrainJob has no
    # Created or Running condition).
    state = local.state if local else lc.job_state(conditions)
    message = (local.message if local else "") or (
        conditions[-1].message if conditions else "the supervisor is starting"
    )
    alive = job.supervisor_alive()
    if body and state not in lc.ENDED and not alive:
        state, message = lc.UNKNOWN, f"the local supervisor died; see {job.supervisor_log}"
    if broken:
        state, message = lc.UNKNOWN, broken
    replicas = local.replicas if local else tuple(LocalReplica(r) for r in lc.replicas_of(workload))
    return JobView(
        backend=backend,
        name=name,
        namespace=manifest["metadata"].get("namespace", "default"),
        state=state,
        message=message,
        conditions=conditions,
        replicas=tuple(_replica(kind, name, r) for r in replicas),
        nodes=replica_count(manifest, workload),
        created=_mtime(job.manifest_file),
        started=local.started if local else None,
        completed=local.completed if local else None,
        storage=StorageLocation.of(manifest),
        ended=(state in lc.ENDED or state == lc.UNKNOWN) and not alive,
        runs_as=runs_as,
        raw={**manifest, "status": body.get("status", {}), "local": body.get("local", {})},
        kind=kind.kind,
    )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _replica(kind: Kind, job_name: str, local: LocalReplica) -> Replica:
    r = local.state
    problems: tuple[str, ...] = ()
    if r.exit_code not in (None, 0):
        why = f": {r.message}" if r.message else ""
        again = "last run " if r.phase == lc.ACTIVE else ""  # the Kubernetes backend's words
        problems = (f"{again}exited with code {r.exit_code}{why}",)
    if local.fault is not None:
        problems += (local.fault.describe(),)
    return Replica(
        name=r.name,
        tag=kind.tag(job_name, r.name),
        phase=r.phase,
        restarts=r.restarts,
        exit_code=r.exit_code,
        problems=problems,
        node=f"{local.address or 'localhost'} (pid {local.pid})" if local.pid else "-",
        created=local.created,
        scheduled=local.created,  # no scheduler: bound to this machine when made
        started=local.first_started,
    )
