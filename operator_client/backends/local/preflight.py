"""What a local start needs, checked before anything starts (Backend.check), read from
the job's pod plan (controlplane/pod_plan.py): its pods fit this machine (replicas,
processes, memory), are admitted at the namespace's Pod Security level, and their
commands, env, volumes and store are usable here; and at the start the job's file://
store claimed (claim_store)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...controlplane.pod_env import PodEnvError
from ...controlplane.pod_plan import JobPlan, PodPlan, unresolved
from ...errors import BadInput
from ...kubeflow.pod_objects import PodObjects
from ...storage import StoreError, open_store
from ..types import Finding, StorageLocation
from . import file_store
from .admission import admission_findings
from .local_env import LOOPBACK, pod_objects, replica_command
from .sandbox.podspec import DEFAULT_UID, ephemeral_limit, identity, mounted_volumes
from .sandbox.relay import loopback_port
from .sandbox.support import MODE_ENV, choose
from .supervisor import restart_delays

# Each replica is a torchrun agent and its workers on this one machine.
MAX_REPLICAS = 64


def preflight(
    manifest: Mapping[str, Any],
    plan: JobPlan,
    *,
    borrowed: list[str],
    runtimes: Mapping[str, Any],
    objects: PodObjects,
    requested: str,
    env: Mapping[str, str],
) -> list[Finding]:
    """Every finding on the pods of `plan` (of `manifest`), read from the plan: `borrowed`
    what was read from the cluster for it, `runtimes` and `objects` what it may use,
    `requested` the replicas' mode (sandbox, process, auto), `env` the environment the
    replicas start from."""
    count = plan.count
    if count > MAX_REPLICAS:
        return [
            Finding(
                "error",
                f"{count} replicas: the local backend runs every replica on this machine "
                f"and takes at most {MAX_REPLICAS}; run it on a cluster, or lower spec.nodes",
                bad_input=True,
            )
        ]

    findings = [Finding("info", f"from the cluster: {what}") for what in borrowed]
    findings += admission_findings(plan)
    if plan.trainjob:
        ref = manifest["spec"]["runtimeRef"]["name"]
        given = "given with --runtime" if ref in runtimes else "built in"
        given = "from the cluster" if f"{ref} (runtime)" in borrowed else given
        groups = ", ".join(f"{g.type} ({g.count})" for g in plan.groups)
        findings.append(
            Finding("info", f"runtime: {ref} ({given}); replicated Jobs in order: {groups}")
        )
    too_many = _process_problem(plan)
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
    findings += _volume_findings(plan, objects, sandboxed)
    for pod in _first_pods(plan):
        try:
            ephemeral_limit(pod, env)
        except ValueError as exc:
            findings.append(Finding("error", f"{pod.type}: {exc}", bad_input=True))
    findings += _env_findings(plan, objects, env)
    return findings


def _first_pods(plan: JobPlan) -> list[PodPlan]:
    """The first pod of each group: every pod of a group has the same template."""
    return [pod for pod in plan.pods if pod.index == 0]


def _env_findings(plan: JobPlan, objects: PodObjects, env: Mapping[str, str]) -> list[Finding]:
    """A pod whose command is not here, or whose env the kubelet could not resolve."""
    bindir = Path(sys.executable).parent
    problems: dict[str, str] = {}
    given: dict[str, PodObjects] = {}
    for pod in plan.pods:
        try:
            replica_command(pod.container, bindir)
            given[pod.name] = pod_objects(pod.container, env, objects)
        except PodEnvError as exc:
            problems[pod.name] = str(exc)
    problems |= unresolved(plan, given, LOOPBACK)
    return [
        Finding("error", f"{pod.name}: {problems[pod.name]}", bad_input=True)
        for pod in plan.pods
        if pod.name in problems
    ]


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


def _volume_findings(plan: JobPlan, objects: PodObjects, sandboxed: bool) -> list[Finding]:
    """Volumes a local run cannot mount, or cannot mount this way (processes mount none)."""

    findings = []
    for pod in _first_pods(plan):
        try:
            given = mounted_volumes(pod, objects)
        except ValueError as exc:
            findings.append(Finding("error", f"{pod.type}: {exc}", bad_input=True))
            continue
        targets = [v.target for v in given]
        if targets and not sandboxed:
            findings.append(
                Finding(
                    "error",
                    f"{pod.type}: volumes at {', '.join(targets)} need pod sandboxes (a plain "
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


def _process_problem(plan: JobPlan) -> str | None:
    """Why this machine cannot run the job's processes (None: it can): every replica is
    a torchrun agent and its workers, all on this machine."""
    total = 0
    for pod in plan.pods:
        nproc = pod.operator_env.get("PET_NPROC_PER_NODE", "1")
        total += 1 + (int(nproc) if nproc.isdigit() else 1)
    capacity = _available_memory() // PROCESS_MEMORY_FLOOR
    if total > capacity:
        return (
            f"{total} processes (every replica's torchrun agent and its workers): this "
            f"machine's available memory holds at most {capacity} of them "
            f"({PROCESS_MEMORY_FLOOR >> 20} MiB each); lower spec.processesPerNode or "
            "spec.nodes, or run it on a cluster"
        )
    return None


def claim_store(manifest: Mapping[str, Any], plan: JobPlan, sandboxed: bool) -> None:
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
            from .sandbox.userns import host_id

            main = next((p for p in plan.pods if p.type == plan.main), None)
            uid, gid, _ = identity(main) if main else (DEFAULT_UID, DEFAULT_UID, True)
            file_store.run_directory(run, store, host_id(uid), host_id(gid))
    except file_store.StoreRefused as exc:
        raise BadInput(f"storage file://{store}: a local run cannot use it: {exc}") from None
