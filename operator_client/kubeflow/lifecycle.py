"""The training-operator's job lifecycle rules (v1.9.4, docs/OPERATOR_CONTRACT.md), as pure
functions: conditions, replica statuses, and what happens when a replica exits.

The local backend applies them to processes; a table test pins each rule. One deliberate
difference: an in-place container restart (restartPolicy OnFailure) shows the job as
Restarting until the replica runs again, where the operator keeps it Running and only the
pod's restartCount grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from . import pytorchjob as pj

CREATED, RUNNING, RESTARTING = "Created", "Running", "Restarting"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
FINISHED = (SUCCEEDED, FAILED)
# A local job also ends when it is stopped (Ctrl-C, delete): its pods are gone, like a
# suspended job's.
ENDED = (*FINISHED, SUSPENDED)
# No condition yet (the operator has not seen the job), or none that holds (a local job
# whose supervisor died: nobody can say).
PENDING_JOB, UNKNOWN = "Pending", "Unknown"

PENDING, ACTIVE, DONE, CRASHED = "Pending", "Running", "Succeeded", "Failed"


@dataclass(frozen=True)
class Policy:
    """The parts of a PyTorchJob that decide its lifecycle."""

    job: str
    restart: Mapping[str, str]  # replica type -> restartPolicy
    backoff_limit: int | None
    active_deadline: int | None
    clean_pods: str
    elastic: bool
    has_master: bool
    grace_seconds: int

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Policy:
        spec = manifest["spec"]
        run = spec.get("runPolicy", {})
        replicas = spec["pytorchReplicaSpecs"]
        grace = [
            int(r["template"]["spec"].get("terminationGracePeriodSeconds", 30))
            for r in replicas.values()
        ]
        return cls(
            job=manifest["metadata"]["name"],
            # OnFailure is the operator's in-memory default for PyTorchJob replicas.
            restart={t: r.get("restartPolicy", "OnFailure") for t, r in replicas.items()},
            backoff_limit=run.get("backoffLimit"),
            active_deadline=run.get("activeDeadlineSeconds"),
            clean_pods=run.get("cleanPodPolicy", "None"),
            elastic=spec.get("elasticPolicy") is not None,
            has_master=pj.MASTER in replicas,
            grace_seconds=max(grace, default=30),
        )


@dataclass(frozen=True)
class Replica:
    """One replica pod of the job (a process, locally)."""

    name: str
    type: str
    index: int
    phase: str = PENDING
    restarts: int = 0  # container restarts, as in the pod's restartCount
    exit_code: int | None = None
    message: str | None = None  # why it last failed (its termination message)


@dataclass(frozen=True)
class Condition:
    type: str
    reason: str
    message: str
    time: float
    status: str = "True"


@dataclass(frozen=True)
class Decision:
    """What the operator does after a replica exits."""

    restart: bool = False  # start the replica again
    counted: bool = False  # the restart counts toward backoffLimit
    condition: str | None = None  # the job's new condition, if any
    reason: str = ""
    message: str = ""


def replicas_of(manifest: Mapping[str, Any]) -> list[Replica]:
    """Every replica pod the operator would create, Master first."""
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    name = manifest["metadata"]["name"]
    return [
        Replica(pj.pod_name(name, rtype, i), rtype, i)
        for rtype in (pj.MASTER, pj.WORKER)
        if rtype in specs
        for i in range(int(specs[rtype].get("replicas", 1)))
    ]


def exit_status(returncode: int) -> int:
    """A container's exit code from a process's return code (-N: killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _succeeded(policy: Policy, replicas: Iterable[Replica]) -> bool:
    reps = list(replicas)
    if policy.has_master:
        return any(r.type == pj.MASTER and r.phase == DONE for r in reps)
    workers = [r for r in reps if r.type == pj.WORKER]
    if policy.elastic:
        return any(r.phase == DONE for r in workers)
    return bool(workers) and all(r.phase == DONE for r in workers)


def _past_backoff_limit(policy: Policy, counted_restarts: int) -> bool:
    if policy.backoff_limit is None:
        return False
    if policy.backoff_limit == 0:
        return counted_restarts > 0
    return counted_restarts >= policy.backoff_limit


def on_exit(
    policy: Policy, replicas: Iterable[Replica], exited: Replica, code: int, counted_restarts: int
) -> Decision:
    """The operator's answer to `exited` ending with exit code `code`; `replicas` hold
    every replica's phase after the exit, `counted_restarts` the restarts counted so far."""
    job = policy.job
    restart_policy = policy.restart.get(exited.type, "OnFailure")
    if code == 0:
        if restart_policy == "Always":
            return Decision(restart=True, counted=True)
        if _succeeded(policy, replicas):
            return Decision(
                condition=SUCCEEDED,
                reason=f"{pj.KIND}Succeeded",
                message=f"{pj.KIND} {job} is successfully completed.",
            )
        return Decision()
    failed = Decision(
        condition=FAILED,
        reason=f"{pj.KIND}Failed",
        message=f"{pj.KIND} {job} is failed because 1 {exited.type} replica(s) failed "
        f"({exited.name} exited with code {code}).",
    )
    restarting = f"{pj.KIND} {job} is restarting because 1 {exited.type} replica(s) failed "
    restarting += f"({exited.name} exited with code {code})."
    if restart_policy == "Never":
        return failed
    if restart_policy == "ExitCode":
        if 1 <= code <= 127:  # a permanent error: the job fails, whatever the backoff
            return failed
        # The operator deletes and recreates the pod: not a container restart.
        return Decision(
            restart=True, condition=RESTARTING, reason=f"{pj.KIND}Restarting", message=restarting
        )
    if _past_backoff_limit(policy, counted_restarts + 1):
        return Decision(
            condition=FAILED,
            reason="BackoffLimitExceeded",
            message=f"{pj.KIND} {job} has failed because it has reached the specified "
            f"backoff limit ({policy.backoff_limit} restarts; {exited.name} exited with "
            f"code {code}).",
        )
    return Decision(
        restart=True,
        counted=True,
        condition=RESTARTING,
        reason=f"{pj.KIND}Restarting",
        message=restarting,
    )


def deadline_exceeded(policy: Policy, started: float, now: float) -> Decision | None:
    """Failed once the job has been active longer than activeDeadlineSeconds."""
    if policy.active_deadline is None or now - started <= policy.active_deadline:
        return None
    return Decision(
        condition=FAILED,
        reason="DeadlineExceeded",
        message=f"{pj.KIND} {policy.job} has failed because it was active longer than "
        f"the specified deadline ({policy.active_deadline}s).",
    )


def set_condition(
    conditions: list[Condition], type_: str, reason: str, message: str, now: float
) -> list[Condition]:
    """The operator's condition update: Running and Restarting replace each other, a
    finished job's Running turns False, and nothing changes after a final condition."""
    if any(c.type in ENDED and c.status == "True" for c in conditions):
        return conditions
    last = conditions[-1] if conditions else None
    if last and last.type == type_ and last.reason == reason and last.message == message:
        return conditions
    kept: list[Condition] = []
    for c in conditions:
        if c.type == type_:
            continue
        if {c.type, type_} == {RUNNING, RESTARTING}:
            continue
        if type_ in ENDED and c.type in (RUNNING, RESTARTING):
            c = replace(c, status="False")
        kept.append(c)
    return [*kept, Condition(type_, reason, message, now)]


class _HasStatus(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def status(self) -> str: ...


def job_state(conditions: Sequence[_HasStatus]) -> str:
    """The job's state in one word, for every backend: the newest condition that holds;
    Pending before the operator has written any, Unknown when none holds."""
    for c in reversed(conditions):
        if c.status == "True":
            return c.type
    return UNKNOWN if conditions else PENDING_JOB


def replica_statuses(replicas: Iterable[Replica]) -> dict[str, dict[str, int]]:
    """`status.replicaStatuses`: active, succeeded and failed pods per replica type."""
    out: dict[str, dict[str, int]] = {}
    for r in replicas:
        counts = out.setdefault(r.type, {"active": 0, "succeeded": 0, "failed": 0})
        key = {ACTIVE: "active", DONE: "succeeded", CRASHED: "failed"}.get(r.phase)
        if key:
            counts[key] += 1
    return out
