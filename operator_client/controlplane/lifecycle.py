"""The operators' job lifecycle rules, as pure functions: conditions, replica statuses,
and what happens when a replica exits. A PyTorchJob follows the training-operator v1.9.4
(docs/OPERATOR_CONTRACT.md); a TrainJob follows its node Job and JobSet (Trainer v2.3,
docs/TRAINJOB.md): pods restart in place up to the Job's backoffLimit, the first failed
Job fails the JobSet, and the job is Complete when every node pod exited 0.

The local backend applies them to processes; a table test pins each rule. Both kinds
share one state machine (Created, Running, Restarting, Succeeded, Failed, Suspended);
`status_body` writes each kind's own status from it (a TrainJob has only Complete, Failed
and Suspended conditions). One deliberate difference: an in-place container restart
(restartPolicy OnFailure) shows the job as Restarting until the replica runs again, where
the operator keeps it Running and only the pod's restartCount grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from ..kubeflow import pytorchjob as pj
from ..kubeflow import trainjob as tj
from .groups import Group
from .workload import Workload, workload_of

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
    """The parts of a job that decide its lifecycle."""

    job: str
    restart: Mapping[str, str]  # replica type -> restartPolicy
    backoff_limit: int | None
    active_deadline: int | None
    clean_pods: str
    elastic: bool
    has_master: bool
    grace_seconds: int
    kind: str = pj.KIND

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Policy:
        return cls.of(workload_of(manifest))

    @classmethod
    def of(cls, workload: Workload) -> Policy:
        spec = workload.manifest["spec"]
        grace = [
            int(g.template["spec"].get("terminationGracePeriodSeconds", 30))
            for g in workload.groups
        ]
        if workload.trainjob:
            # Its own deadline; its one Job's remaining pods end when the Job fails.
            deadline, clean = spec.get("activeDeadlineSeconds"), "Running"
        else:
            run = spec.get("runPolicy", {})
            deadline, clean = run.get("activeDeadlineSeconds"), run.get("cleanPodPolicy", "None")
        return cls(
            job=workload.name,
            restart={g.type: g.restart_policy for g in workload.groups},
            backoff_limit=workload.main.backoff_limit if workload.groups else None,
            active_deadline=deadline,
            clean_pods=clean,
            elastic=spec.get("elasticPolicy") is not None,
            has_master=any(g.type == pj.MASTER for g in workload.groups),
            grace_seconds=max(grace, default=30),
            kind=workload.kind,
        )


@dataclass(frozen=True)
class ReplicaState:
    """One replica pod as the operator's state machine tracks it (a process, locally);
    what a backend shows of it is backends.types.Replica."""

    name: str
    type: str
    index: int
    phase: str = PENDING
    restarts: int = 0  # container restarts, as in the pod's restartCount
    exit_code: int | None = None  # its last run's, kept by a restart (the pod's lastState)
    message: str | None = None  # why it last failed (its termination message)


@dataclass(frozen=True)
class ConditionState:
    """A condition as the state machine sets it (time: seconds since the epoch); what a
    backend shows of a job's conditions is backends.types.Condition."""

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
    detail: str = ""  # beyond the condition's message, for kctl-train's own status line

    @property
    def in_place(self) -> bool:
        """The kubelet restarts the container (crash_loop.py's wait): the restarts that
        count toward backoffLimit are exactly these, as the operators count the pods'
        restartCount; a pod recreated for ExitCode is not counted."""
        return self.restart and self.counted


def replicas_of(manifest: Mapping[str, Any] | Workload) -> list[ReplicaState]:
    """Every replica pod the operator would create, Master first."""
    workload = manifest if isinstance(manifest, Workload) else workload_of(manifest)
    return [ReplicaState(name, rtype, i) for name, rtype, i in workload.pods()]


def exit_status(returncode: int) -> int:
    """A container's exit code from a process's return code (-N: killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _succeeded(policy: Policy, replicas: Iterable[ReplicaState]) -> bool:
    reps = list(replicas)
    if policy.has_master:
        return any(r.type == pj.MASTER and r.phase == DONE for r in reps)
    # Without a Master, every Worker (a TrainJob: every node pod, one per completion
    # index); elastic, any Worker.
    workers = [r for r in reps if r.type != pj.MASTER]
    if policy.elastic:
        return any(r.phase == DONE for r in workers)
    return bool(workers) and all(r.phase == DONE for r in workers)


def _past_backoff_limit(policy: Policy, counted_restarts: int) -> bool:
    # The training-operator's rule and the Job controller's for restartPolicy OnFailure
    # (the pods' restart counts against backoffLimit) are the same.
    if policy.backoff_limit is None:
        return False
    if policy.backoff_limit == 0:
        return counted_restarts > 0
    return counted_restarts >= policy.backoff_limit


def words(
    policy: Policy, event: str, exited: ReplicaState | None = None, code: int = 0
) -> tuple[str, str]:
    """The reason and message the job's operator writes for `event`: created, running,
    succeeded, failed, restarting, backoff or deadline (`exited`: the replica whose exit
    caused it, with `code`)."""
    job = policy.job
    why = f"({exited.name} exited with code {code})" if exited else ""
    if policy.kind == tj.KIND:
        # Copied from the JobSet's condition, as Trainer does; JobSet names the first
        # failed Job only (the pod's exit is in kctl-train's own line: detail()).
        failed = "jobset failed due to one or more job failures (first failed job: "
        failed += f"{tj.job_name(job, exited.type if exited else tj.REPLICATED_JOB)})"
        return {
            "created": ("Created", f"TrainJob {job} is created."),
            "running": ("Running", f"TrainJob {job} is running."),
            "succeeded": ("AllJobsCompleted", "jobset completed successfully"),
            "failed": ("FailedJobs", failed),
            "restarting": ("Restarting", f"TrainJob {job}: the container restarts in place {why}"),
            "backoff": ("FailedJobs", failed),
            "deadline": ("DeadlineExceeded", "TrainJob exceeded its active deadline"),
        }[event]
    kind, failing = pj.KIND, f"1 {exited.type if exited else ''} replica(s) failed {why}."
    return {
        "created": (f"{kind}Created", f"{kind} {job} is created."),
        "running": (f"{kind}Running", f"{kind} {job} is running."),
        "succeeded": (f"{kind}Succeeded", f"{kind} {job} is successfully completed."),
        "failed": (f"{kind}Failed", f"{kind} {job} is failed because {failing}"),
        "restarting": (f"{kind}Restarting", f"{kind} {job} is restarting because {failing}"),
        "backoff": (
            "BackoffLimitExceeded",
            f"{kind} {job} has failed because it has reached the specified backoff limit "
            f"({policy.backoff_limit} restarts; {why[1:-1]}).",
        ),
        "deadline": (
            "DeadlineExceeded",
            f"{kind} {job} has failed because it was active longer than the specified "
            f"deadline ({policy.active_deadline}s).",
        ),
    }[event]


def detail(policy: Policy, event: str, exited: ReplicaState, code: int) -> str:
    """kctl-train's own line for a TrainJob's failure (its condition names only the
    Job): which pod exited how; empty where the condition says it already."""
    if policy.kind != tj.KIND or event not in ("failed", "backoff"):
        return ""
    limit = f" and its Job reached the backoff limit ({policy.backoff_limit} restarts)"
    return f"{exited.name} exited with code {code}{limit if event == 'backoff' else ''}"


def _decide(policy: Policy, event: str, exited: ReplicaState, code: int, **kw: bool) -> Decision:
    condition = {"succeeded": SUCCEEDED, "restarting": RESTARTING}.get(event, FAILED)
    reason, message = words(policy, event, exited, code)
    return Decision(
        condition=condition,
        reason=reason,
        message=message,
        detail=detail(policy, event, exited, code),
        **kw,
    )


def on_exit(
    policy: Policy,
    replicas: Iterable[ReplicaState],
    exited: ReplicaState,
    code: int,
    counted_restarts: int,
) -> Decision:
    """The operator's answer to `exited` ending with exit code `code`; `replicas` hold
    every replica's phase after the exit, `counted_restarts` the restarts counted so far."""
    restart_policy = policy.restart.get(exited.type, "OnFailure")
    if code == 0:
        if restart_policy == "Always":
            return Decision(restart=True, counted=True)
        if _succeeded(policy, replicas):
            return _decide(policy, "succeeded", exited, code)
        return Decision()
    if restart_policy == "Never":
        return _decide(policy, "failed", exited, code)
    if restart_policy == "ExitCode":
        if 1 <= code <= 127:  # a permanent error: the job fails, whatever the backoff
            return _decide(policy, "failed", exited, code)
        # The operator deletes and recreates the pod: not a container restart.
        return _decide(policy, "restarting", exited, code, restart=True)
    if _past_backoff_limit(policy, counted_restarts + 1):
        return _decide(policy, "backoff", exited, code)
    return _decide(policy, "restarting", exited, code, restart=True, counted=True)


def deadline_exceeded(policy: Policy, started: float, now: float) -> Decision | None:
    """Failed once the job has been active longer than activeDeadlineSeconds."""
    if policy.active_deadline is None or now - started <= policy.active_deadline:
        return None
    reason, message = words(policy, "deadline")
    return Decision(condition=FAILED, reason=reason, message=message)


def set_condition(
    conditions: list[ConditionState], type_: str, reason: str, message: str, now: float
) -> list[ConditionState]:
    """The operator's condition update: Running and Restarting replace each other, a
    finished job's Running turns False, and nothing changes after a final condition."""
    if any(c.type in ENDED and c.status == "True" for c in conditions):
        return conditions
    last = conditions[-1] if conditions else None
    if last and last.type == type_ and last.reason == reason and last.message == message:
        return conditions
    kept: list[ConditionState] = []
    for c in conditions:
        if c.type == type_:
            continue
        if {c.type, type_} == {RUNNING, RESTARTING}:
            continue
        if type_ in ENDED and c.type in (RUNNING, RESTARTING):
            c = replace(c, status="False")
        kept.append(c)
    return [*kept, ConditionState(type_, reason, message, now)]


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


def replica_statuses(replicas: Iterable[ReplicaState]) -> dict[str, dict[str, int]]:
    """`status.replicaStatuses`: active, succeeded and failed pods per replica type."""
    out: dict[str, dict[str, int]] = {}
    for r in replicas:
        counts = out.setdefault(r.type, {"active": 0, "succeeded": 0, "failed": 0})
        key = {ACTIVE: "active", DONE: "succeeded", CRASHED: "failed"}.get(r.phase)
        if key:
            counts[key] += 1
    return out


def rfc3339(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


# The state machine's final conditions as a TrainJob writes them; it has no others.
TRAINJOB_CONDITIONS = {SUCCEEDED: "Complete", FAILED: "Failed", SUSPENDED: "Suspended"}


def status_body(
    policy: Policy,
    conditions: Sequence[ConditionState],
    replicas: Iterable[ReplicaState],
    started: float,
    completed: float | None,
) -> dict[str, Any]:
    """The job's `status` as its operator writes it: a PyTorchJob's conditions, replica
    statuses and times; a TrainJob's Complete, Failed or Suspended condition and the
    replicated Jobs' counts (jobsStatus: one Job each, so each count is 0 or 1)."""
    reps = list(replicas)
    if policy.kind == tj.KIND:
        state = job_state(conditions)
        jobs: dict[str, list[ReplicaState]] = {}
        for r in reps:
            jobs.setdefault(r.type, []).append(r)
        return {
            "conditions": [
                _condition_body(replace(c, type=TRAINJOB_CONDITIONS[c.type]))
                for c in conditions
                if c.type in TRAINJOB_CONDITIONS
            ],
            "jobsStatus": [_job_status(name, pods, state) for name, pods in jobs.items()],
        }
    return {
        "conditions": [_condition_body(c) for c in conditions],
        "replicaStatuses": replica_statuses(reps),
        "startTime": rfc3339(started),
        "completionTime": rfc3339(completed),
    }


def _job_status(name: str, pods: list[ReplicaState], state: str) -> dict[str, Any]:
    """One replicated Job's entry of a TrainJob's jobsStatus."""
    done = bool(pods) and all(r.phase == DONE for r in pods)
    failed = any(r.phase == CRASHED for r in pods) and state == FAILED
    active = state not in ENDED and not done and any(r.phase in (ACTIVE, PENDING) for r in pods)
    return {
        "name": name,
        "ready": int(active and all(r.phase == ACTIVE for r in pods)),
        "succeeded": int(done),
        "failed": int(failed),
        "active": int(active),
        "suspended": int(state == SUSPENDED),
    }


def startable(
    groups: Sequence[Group], replicas: Iterable[ReplicaState], started: Iterable[str]
) -> list[str]:
    """The groups (TrainJob: replicated Jobs) not yet started whose dependsOn holds:
    every pod of each Job they depend on Succeeded ("Complete") or Running ("Ready")."""
    reps = list(replicas)
    begun = set(started)

    def reached(name: str, status: str) -> bool:
        pods = [r for r in reps if r.type == name]
        want = DONE if status == "Complete" else ACTIVE
        return name in begun and all(r.phase in (want, DONE) for r in pods)

    return [
        g.type
        for g in groups
        if g.type not in begun and all(reached(n, s) for n, s in g.depends_on)
    ]


def _condition_body(c: ConditionState) -> dict[str, Any]:
    return {
        "type": c.type,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastTransitionTime": rfc3339(c.time),
    }


def state_of(obj: Mapping[str, Any]) -> str:
    """The state of a PyTorchJob or TrainJob object in one word, for every backend
    (job_state's words: a TrainJob's Complete is Succeeded). A TrainJob without a final
    condition is Running while its node Job is active, else Created."""
    status = obj.get("status") or {}
    conditions = [
        _Held(str(c.get("type", "")), str(c.get("status", "")))
        for c in status.get("conditions") or []
    ]
    if obj.get("kind") != tj.KIND:
        return job_state(conditions)
    held = {c.type for c in conditions if c.status == "True"}
    for v1, v2 in TRAINJOB_CONDITIONS.items():
        if v2 in held:
            return v1
    jobs = status.get("jobsStatus") or []
    if any(j.get("active") or j.get("ready") for j in jobs):
        return RUNNING
    return CREATED if jobs else PENDING_JOB


@dataclass(frozen=True)
class _Held:
    type: str
    status: str
