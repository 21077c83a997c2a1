"""What a local start needs, checked before anything starts (Backend.check): the workload
fits this machine (replicas, processes, memory), its pods are admitted at the namespace's
Pod Security level, its commands, env, volumes and store are usable here; and at the start
the job's file:// store claimed (claim_store)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...controlplane import lifecycle as lc
from ...controlplane.pod_env import PodEnvError
from ...controlplane.workload import Workload, WorkloadError
from ...errors import BadInput
from ...kubeflow.pod_objects import PodObjects
from ...storage import StoreError, open_store
from ..types import Finding, StorageLocation
from . import file_store
from .admission import admission_findings
from .local_env import replica_command, replica_env
from .sandbox.relay import loopback_port
from .sandbox.support import MODE_ENV, choose
from .supervisor import restart_delays

# Each replica is a torchrun agent and its workers on this one machine.
MAX_REPLICAS = 64


def preflight(
    manifest: Mapping[str, Any],
    workload: Workload,
    *,
    borrowed: list[str],
    runtimes: Mapping[str, Any],
    objects: PodObjects,
    pod_security: str,
    requested: str,
    env: Mapping[str, str],
) -> list[Finding]:
    """Every finding on `workload` (of `manifest`): `borrowed` what was read from the
    cluster for it, `runtimes` and `objects` what it may use, `pod_security` the level
    its pods are admitted at, `requested` the replicas' mode (sandbox, process, auto),
    `env` the environment the replicas start from."""
    bindir = Path(sys.executable).parent
    count = workload.count
    if count > MAX_REPLICAS:
        return [
            Finding(
                "error",
                f"{count} replicas: the local backend runs every replica on this machine "
                f"and takes at most {MAX_REPLICAS}; run it on a cluster, or lower spec.nodes",
                bad_input=True,
            )
        ]
    # Here, not at the top: the pod description reads quantities with the spec's
    # parser (pydantic), which the commands that only look at jobs never load.
    from .sandbox.podspec import DEFAULT_UID, ephemeral_limit

    findings = [Finding("info", f"from the cluster: {what}") for what in borrowed]
    findings += admission_findings(workload, pod_security, DEFAULT_UID)
    if workload.trainjob:
        ref = manifest["spec"]["runtimeRef"]["name"]
        given = "given with --runtime" if ref in runtimes else "built in"
        given = "from the cluster" if f"{ref} (runtime)" in borrowed else given
        groups = ", ".join(f"{g.type} ({g.count})" for g in workload.groups)
        findings.append(
            Finding("info", f"runtime: {ref} ({given}); replicated Jobs in order: {groups}")
        )
    too_many = _process_problem(workload)
    if too_many:
        findings.append(Finding("error", too_many, bad_input=True))
    try:
        restart_delays(env)
    except ValueError as exc:
        findings.append(Finding("error", str(exc), bad_input=True))
    unfollowed = StorageLocation.problem(manifest)
    if unfollowed:
        findings.append(Finding("error", unfollowed, bad_input=True))
    location = StorageLocation.of(manifest)
    findings += _endpoint_findings(location)
    stores = file_store.roots(location.root) if location else None
    refused = file_store.store_problem(stores[0]) if stores else None
    if refused:
        findings.append(
            Finding(
                "error",
                f"storage file://{stores[0] if stores else ''}: a local run cannot use "
                f"it: {refused} (or give --storage)",
                bad_input=True,
            )
        )
    sandboxed = True
    try:
        mode = choose(requested, location.endpoint if location else None)
        sandboxed = mode.sandboxed
        findings.append(Finding("info", f"replicas: {mode.describe()}; {mode.detail()}"))
    except OSError as exc:
        findings.append(Finding("error", f"{exc}; run as processes with {MODE_ENV}=process"))
    findings += _volume_findings(workload, objects, sandboxed)
    for group in workload.groups:
        try:
            ephemeral_limit(workload, group.type, env)
        except ValueError as exc:
            findings.append(Finding("error", f"{group.type}: {exc}", bad_input=True))
    for replica in lc.replicas_of(workload):
        try:
            replica_command(workload.container(replica.type), bindir)
            replica_env(
                workload,
                replica,
                port=0,
                base=env,
                tmpdir=Path("/nonexistent"),
                objects=objects,
            )
        except (PodEnvError, WorkloadError) as exc:
            findings.append(Finding("error", f"{replica.name}: {exc}", bad_input=True))
    return findings


# A torchrun agent or worker with torch imported holds at least this much memory: this
# machine cannot run more processes than its available memory holds of them.
PROCESS_MEMORY_FLOOR = 128 << 20


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _volume_findings(workload: Workload, objects: PodObjects, sandboxed: bool) -> list[Finding]:
    """Volumes a local run cannot mount, or cannot mount this way (processes mount none)."""
    from .sandbox.podspec import mounted_volumes

    findings = []
    for group in workload.groups:
        try:
            given = mounted_volumes(workload, group.type, objects)
        except ValueError as exc:
            findings.append(Finding("error", f"{group.type}: {exc}", bad_input=True))
            continue
        targets = [v.target for v in given]
        if targets and not sandboxed:
            findings.append(
                Finding(
                    "error",
                    f"{group.type}: volumes at {', '.join(targets)} need pod sandboxes (a plain "
                    "process sees this machine's files, not the pod's volumes); run as root "
                    f"without {MODE_ENV}=process",
                    bad_input=True,
                )
            )
    return findings


def _endpoint_findings(location: StorageLocation | None) -> list[Finding]:
    """An S3 endpoint on this machine's loopback is relayed into the pods only when it
    answers as the job's store: the relay never opens a path to any other local port."""
    if location is None or loopback_port(location.endpoint) is None:
        return []
    try:
        open_store(location.root, endpoint=location.endpoint, region=location.region).probe()
    except (StoreError, BadInput) as exc:
        return [
            Finding(
                "error",
                f"storage endpoint {location.endpoint}: it does not answer as the job's store "
                f"({exc}); a local run relays pods only to a store that does",
                bad_input=True,
            )
        ]
    return []


def _process_problem(workload: Workload) -> str | None:
    """Why this machine cannot run the job's processes (None: it can): every replica is
    a torchrun agent and its workers, all on this machine."""
    total = 0
    for group in workload.groups:
        nproc = workload.operator_env(group.type, 0).get("PET_NPROC_PER_NODE", "1")
        total += group.count * (1 + (int(nproc) if nproc.isdigit() else 1))
    capacity = _available_memory() // PROCESS_MEMORY_FLOOR
    if total > capacity:
        return (
            f"{total} processes (every replica's torchrun agent and its workers): this "
            f"machine's available memory holds at most {capacity} of them "
            f"({PROCESS_MEMORY_FLOOR >> 20} MiB each); lower spec.processesPerNode or "
            "spec.nodes, or run it on a cluster"
        )
    return None


def claim_store(manifest: Mapping[str, Any], workload: Workload, sandboxed: bool) -> None:
    """Make the job's file:// store one of kctl-train's, and in pod sandboxes its run
    directory the pods' own (BadInput saying why not)."""
    location = StorageLocation.of(manifest)
    stores = file_store.roots(location.root) if location else None
    if stores is None:
        return
    store, run = stores
    try:
        file_store.claim(store)
        if sandboxed:
            from .sandbox.podspec import identity
            from .sandbox.userns import host_id

            uid, gid, _ = identity(workload, workload.main.type)
            file_store.run_directory(run, store, host_id(uid), host_id(gid))
    except file_store.StoreRefused as exc:
        raise BadInput(f"storage file://{store}: a local run cannot use it: {exc}") from None
