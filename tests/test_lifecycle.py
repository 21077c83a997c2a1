"""The operator's lifecycle rules (controlplane/lifecycle.py), one table row per rule."""

from __future__ import annotations

from typing import Any

import pytest

from operator_client.controlplane import crash_loop
from operator_client.controlplane import lifecycle as lc


def policy(**overrides: Any) -> lc.Policy:
    values: dict[str, Any] = {
        "job": "j",
        "restart": {"Master": "OnFailure", "Worker": "OnFailure"},
        "backoff_limit": 6,
        "active_deadline": None,
        "clean_pods": "Running",
        "elastic": False,
        "has_master": True,
        "grace_seconds": 30,
    }
    values.update(overrides)
    return lc.Policy(**values)


M = lc.ReplicaState("j-master-0", "Master", 0)
W0 = lc.ReplicaState("j-worker-0", "Worker", 0)
W1 = lc.ReplicaState("j-worker-1", "Worker", 1)


def done(r: lc.ReplicaState) -> lc.ReplicaState:
    return lc.ReplicaState(r.name, r.type, r.index, phase=lc.DONE)


def running(r: lc.ReplicaState) -> lc.ReplicaState:
    return lc.ReplicaState(r.name, r.type, r.index, phase=lc.ACTIVE)


WORKERS_ONLY = {"has_master": False, "restart": {"Worker": "OnFailure"}}
TRAINJOB = {"kind": "TrainJob", "has_master": False, "restart": {"node": "OnFailure"}}
N0 = lc.ReplicaState("j-node-0-0", "node", 0)
N1 = lc.ReplicaState("j-node-0-1", "node", 1)
CASES = [
    # (policy overrides, replicas after the exit, exited, code, counted so far, expected)
    ({}, [done(M), running(W0)], M, 0, 0, (False, lc.SUCCEEDED, "PyTorchJobSucceeded")),
    ({}, [running(M), done(W0)], W0, 0, 0, (False, None, "")),
    (
        {**WORKERS_ONLY, "elastic": True},
        [done(W0), running(W1)],
        W0,
        0,
        0,
        (False, lc.SUCCEEDED, "PyTorchJobSucceeded"),
    ),
    (WORKERS_ONLY, [done(W0), running(W1)], W0, 0, 0, (False, None, "")),
    (
        WORKERS_ONLY,
        [done(W0), done(W1)],
        W1,
        0,
        0,
        (False, lc.SUCCEEDED, "PyTorchJobSucceeded"),
    ),
    ({}, [running(M), W0], W0, 137, 0, (True, lc.RESTARTING, "PyTorchJobRestarting")),
    ({}, [running(M), W0], W0, 1, 0, (True, lc.RESTARTING, "PyTorchJobRestarting")),
    ({}, [running(M), W0], W0, 1, 5, (False, lc.FAILED, "BackoffLimitExceeded")),
    ({"backoff_limit": 0}, [running(M), W0], W0, 1, 0, (False, lc.FAILED, "BackoffLimitExceeded")),
    (
        {"backoff_limit": None},
        [running(M), W0],
        W0,
        1,
        99,
        (True, lc.RESTARTING, "PyTorchJobRestarting"),
    ),
    (
        {"restart": {"Master": "Never", "Worker": "Never"}},
        [running(M), W0],
        W0,
        137,
        0,
        (False, lc.FAILED, "PyTorchJobFailed"),
    ),
    (
        {"restart": {"Master": "ExitCode", "Worker": "ExitCode"}},
        [running(M), W0],
        W0,
        3,
        0,
        (False, lc.FAILED, "PyTorchJobFailed"),
    ),
    (
        {"restart": {"Master": "ExitCode", "Worker": "ExitCode"}},
        [running(M), W0],
        W0,
        143,
        99,
        (True, lc.RESTARTING, "PyTorchJobRestarting"),
    ),
    # A TrainJob: one node Job of Indexed pods (OnFailure, backoffLimit 6) in a JobSet.
    ({**TRAINJOB}, [done(N0), running(N1)], N0, 0, 0, (False, None, "")),
    ({**TRAINJOB}, [done(N0), done(N1)], N1, 0, 0, (False, lc.SUCCEEDED, "AllJobsCompleted")),
    ({**TRAINJOB}, [N0, running(N1)], N0, 137, 0, (True, lc.RESTARTING, "Restarting")),
    ({**TRAINJOB}, [N0, running(N1)], N0, 1, 5, (False, lc.FAILED, "FailedJobs")),
]


@pytest.mark.parametrize(("overrides", "replicas", "exited", "code", "counted", "expected"), CASES)
def test_what_the_operator_does_when_a_replica_exits(
    overrides: dict[str, Any],
    replicas: list[lc.ReplicaState],
    exited: lc.ReplicaState,
    code: int,
    counted: int,
    expected: tuple[bool, str | None, str],
) -> None:
    decision = lc.on_exit(policy(**overrides), replicas, exited, code, counted)
    assert (decision.restart, decision.condition, decision.reason) == expected


def test_exit_code_restarts_do_not_count_toward_the_backoff_limit() -> None:
    ec = policy(restart={"Master": "ExitCode", "Worker": "ExitCode"})
    assert not lc.on_exit(ec, [M, W0], W0, 137, 0).counted
    assert lc.on_exit(policy(), [M, W0], W0, 137, 0).counted


def test_signals_become_128_plus_n() -> None:
    assert [lc.exit_status(rc) for rc in (0, 1, -9, -15)] == [0, 1, 137, 143]


def test_deadline() -> None:
    assert lc.deadline_exceeded(policy(active_deadline=10), 100.0, 110.0) is None
    decision = lc.deadline_exceeded(policy(active_deadline=10), 100.0, 110.5)
    assert decision is not None and decision.reason == "DeadlineExceeded"
    assert lc.deadline_exceeded(policy(), 0.0, 1e9) is None


def test_conditions_follow_the_operator() -> None:
    conds = lc.set_condition([], lc.CREATED, "c", "created", 1)
    conds = lc.set_condition(conds, lc.RUNNING, "r", "running", 2)
    conds = lc.set_condition(conds, lc.RESTARTING, "x", "restarting", 3)
    assert [c.type for c in conds] == [lc.CREATED, lc.RESTARTING]  # they replace each other
    conds = lc.set_condition(conds, lc.RUNNING, "r", "running", 4)
    assert [c.type for c in conds] == [lc.CREATED, lc.RUNNING]
    assert lc.set_condition(conds, lc.RUNNING, "r", "running", 5) == conds  # no duplicate
    conds = lc.set_condition(conds, lc.FAILED, "f", "failed", 6)
    assert [(c.type, c.status) for c in conds] == [
        (lc.CREATED, "True"),
        (lc.RUNNING, "False"),
        (lc.FAILED, "True"),
    ]
    assert lc.set_condition(conds, lc.RUNNING, "r", "running", 7) == conds  # final
    assert lc.job_state(conds) == lc.FAILED


def test_replica_statuses_count_pods_per_type() -> None:
    crashed = lc.ReplicaState("j-worker-1", "Worker", 1, phase=lc.CRASHED)
    statuses = lc.replica_statuses([running(M), done(W0), crashed])
    assert statuses == {
        "Master": {"active": 1, "succeeded": 0, "failed": 0},
        "Worker": {"active": 0, "succeeded": 1, "failed": 1},
    }


def test_policy_from_a_manifest_uses_the_operator_defaults() -> None:
    manifest = {
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "template": {"spec": {"containers": []}}}
            },
            "elasticPolicy": {"minReplicas": 1},
        },
    }
    p = lc.Policy.from_manifest(manifest)
    assert p.restart == {"Worker": "OnFailure"}
    assert (p.backoff_limit, p.clean_pods, p.grace_seconds) == (None, "None", 30)
    assert p.elastic and not p.has_master


def test_a_trainjob_fails_as_its_jobset_and_writes_only_v2_conditions() -> None:
    tj = policy(**TRAINJOB)
    decision = lc.on_exit(tj, [N0, running(N1)], N0, 1, 5)
    # JobSet's wording (pkg/controllers/failure_policy.go): the first failed Job only;
    # the pod's exit is kctl-train's own detail.
    assert decision.message == (
        "jobset failed due to one or more job failures (first failed job: j-node-0)"
    )
    assert decision.detail == (
        "j-node-0-0 exited with code 1 and its Job reached the backoff limit (6 restarts)"
    )
    deadline = lc.deadline_exceeded(policy(**TRAINJOB, active_deadline=1), 0.0, 2.0)
    assert deadline is not None
    assert (deadline.reason, deadline.message) == (
        "DeadlineExceeded",
        "TrainJob exceeded its active deadline",
    )
    conds = lc.set_condition([], lc.CREATED, *lc.words(tj, "created"), 1)
    conds = lc.set_condition(conds, lc.RUNNING, *lc.words(tj, "running"), 2)
    running_body = lc.status_body(tj, conds, [running(N0), N1], 1.0, None)
    assert running_body["conditions"] == []  # Trainer writes no Created or Running
    assert running_body["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    ]
    assert lc.state_of({"kind": "TrainJob", "status": running_body}) == lc.RUNNING
    conds = lc.set_condition(conds, lc.SUCCEEDED, *lc.words(tj, "succeeded"), 3)
    body = lc.status_body(tj, conds, [done(N0), done(N1)], 1.0, 3.0)
    assert [(c["type"], c["reason"]) for c in body["conditions"]] == [
        ("Complete", "AllJobsCompleted")
    ]
    assert body["jobsStatus"][0]["succeeded"] == 1 and body["jobsStatus"][0]["active"] == 0
    assert "startTime" not in body and "replicaStatuses" not in body


def held(*types: str, status: str = "True") -> list[dict[str, str]]:
    return [{"type": t, "status": status} for t in types]


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        ({"kind": "PyTorchJob"}, lc.PENDING_JOB),
        ({"kind": "PyTorchJob", "status": {"conditions": held("Created")}}, lc.CREATED),
        ({"status": {"conditions": held("Created", "Succeeded")}}, lc.SUCCEEDED),
        ({"kind": "TrainJob"}, lc.PENDING_JOB),
        ({"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node"}]}}, lc.CREATED),
        ({"kind": "TrainJob", "status": {"jobsStatus": [{"active": 1}]}}, lc.RUNNING),
        ({"kind": "TrainJob", "status": {"conditions": held("Complete")}}, lc.SUCCEEDED),
        ({"kind": "TrainJob", "status": {"conditions": held("Failed")}}, lc.FAILED),
        ({"kind": "TrainJob", "status": {"conditions": held("Suspended")}}, lc.SUSPENDED),
        # Kueue admitted it: Suspended=False (Resumed), and its Job runs.
        (
            {
                "kind": "TrainJob",
                "status": {
                    "conditions": held("Suspended", status="False"),
                    "jobsStatus": [{"active": 1}],
                },
            },
            lc.RUNNING,
        ),
    ],
)
def test_one_state_word_for_either_kind(obj: dict[str, Any], state: str) -> None:
    assert lc.state_of(obj) == state


def test_only_the_kubelet_restarts_a_container_in_place() -> None:
    ec = policy(restart={"Master": "ExitCode", "Worker": "ExitCode"})
    assert not lc.on_exit(ec, [M, W0], W0, 137, 0).in_place  # the operator makes a new pod
    assert lc.on_exit(policy(), [M, W0], W0, 137, 0).in_place
    always = policy(restart={"Master": "Always", "Worker": "Always"})
    assert lc.on_exit(always, [M, W0], W0, 0, 0).in_place


# (exit times, in seconds, of one container restarted in place; the waits before each
# restart) with the back-off 1 s doubling to 30 s (the kubelet's 10 s to 300 s, scaled).
CRASH_LOOPS = [
    ([0.0], [0.0]),  # the first restart: at once
    ([0.0, 5.0, 12.0, 20.0], [0.0, 1.0, 2.0, 4.0]),
    ([0.0, 0.5, 2.0, 5.0, 10.0, 25.0, 60.0, 100.0], [0, 1, 2, 4, 8, 16, 30, 30]),
    # A container that ran more than 2 x 30 s since its last restart (due at 5 + 1) starts
    # over; one that ran 59.5 s does not.
    ([0.0, 5.0, 66.5], [0.0, 1.0, 0.0]),
    ([0.0, 5.0, 65.5, 70.0], [0.0, 1.0, 2.0, 4.0]),
    ([0.0, 100.0, 101.0], [0.0, 0.0, 1.0]),
]


@pytest.mark.parametrize(("exits", "waits"), CRASH_LOOPS)
def test_the_kubelets_wait_before_each_restart(exits: list[float], waits: list[float]) -> None:
    loop, seen = crash_loop.CrashLoop(), []
    for exited_at in exits:
        wait, loop = crash_loop.next_restart(loop, exited_at, 1.0, 30.0)
        seen.append(wait)
    assert seen == waits
