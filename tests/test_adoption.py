"""A supervisor taking over the pods a dead one left (backends/local/adoption.py): the
shim's exit record, a process replica's keeper that writes one too, the pidfd that follows
a pod it did not start, and the status it goes on from (the pods' network faults
included). The whole takeover, with real pod
sandboxes, is in test_pod_sandbox.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operator_client.backends.local.adoption import KILLED, AdoptedPod
from operator_client.backends.local.jobdir import JobDir, LocalReplica, LocalStatus, NetworkFault
from operator_client.backends.local.pods import keeper
from operator_client.backends.local.sandbox import exit_record
from operator_client.backends.types import Fault
from operator_client.contract import PARTITION, SLOW
from operator_client.controlplane import lifecycle as lc


@pytest.mark.parametrize(
    ("text", "shim", "found"),
    [
        ('{"shim": 41, "code": 143}', 41, 143),
        ('{"shim": 41, "code": 0}', 41, 0),
        ('{"shim": 40, "code": 143}', 41, None),  # an earlier start's record
        ('{"shim": 41, "code": true}', 41, None),
        ('{"shim": 41}', 41, None),
        ("[41, 143]", 41, None),
        ("{not json", 41, None),
        (None, 41, None),  # the shim was killed itself: no record
    ],
)
def test_an_exit_record_is_read_only_as_its_shim_wrote_it(
    tmp_path: Path, text: str | None, shim: int, found: int | None
) -> None:
    record = tmp_path / "exit.json"
    if text is not None:
        record.write_text(text)
    assert exit_record.read(record, shim) == found


def test_an_exit_record_is_written_whole(tmp_path: Path) -> None:
    record = tmp_path / "exit.json"
    exit_record.write(record, 41, 137)
    exit_record.write(record, 42, 0)  # the next start's shim replaces it
    assert exit_record.read(record, 42) == 0 and exit_record.read(record, 41) is None
    assert [p.name for p in tmp_path.iterdir()] == ["exit.json"]


def a_shim(job: JobDir, name: str) -> subprocess.Popen[bytes]:
    """A process that is to the supervisor what a pod's shim is: its argument is the
    pod's description."""
    description = job.pod_dir(name) / "pod.json"
    description.parent.mkdir(parents=True)
    code = "import sys, time; time.sleep(60)"
    shim = subprocess.Popen([sys.executable, "-c", code, str(description)])
    # Until it has exec'd, the child's arguments are this process's.
    while os.fsencode(description) not in Path(f"/proc/{shim.pid}/cmdline").read_bytes():
        time.sleep(0.01)
    return shim


def poll_until_ended(pod: AdoptedPod) -> int:
    deadline = time.monotonic() + 20
    while (code := pod.poll()) is None:
        assert time.monotonic() < deadline, "the pod's end was not seen"
        time.sleep(0.05)
    return code


def test_an_adopted_pod_is_followed_to_its_recorded_exit(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    shim = a_shim(job, "p-master-0")
    try:
        pod = AdoptedPod.of(job, "p-master-0", shim.pid)
        assert pod.poll() is None and pod.pid == shim.pid
        exit_record.write(job.exit_record("p-master-0"), shim.pid, 143)
        pod.send_signal(signal.SIGTERM)
        assert poll_until_ended(pod) == 143 and pod.wait() == 143
    finally:
        shim.kill()
        shim.wait()


def test_a_pod_killed_with_its_shim_ended_with_the_kill(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    shim = a_shim(job, "p-master-0")
    pod = AdoptedPod.of(job, "p-master-0", shim.pid)
    shim.kill()
    assert pod.wait() == KILLED
    shim.wait()


def test_a_pid_that_is_not_the_pods_shim_is_taken_for_an_ended_pod(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    shim = a_shim(job, "p-master-0")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        exit_record.write(job.exit_record("p-master-0"), other.pid, 0)
        # The PID was reused by a process that is no pod's shim: the pod is over, and
        # the process is neither followed nor signalled.
        pod = AdoptedPod.of(job, "p-master-0", other.pid)
        assert pod.poll() == 0
        pod.send_signal(signal.SIGKILL)
        assert other.poll() is None
        gone = AdoptedPod.of(job, "p-master-0", 2**22 + 1)  # above pid_max's ceiling
        assert gone.poll() == KILLED
    finally:
        for process in (shim, other):
            process.kill()
            process.wait()


def test_the_status_a_supervisor_goes_on_from_reads_back_whole() -> None:
    status = LocalStatus(
        state=lc.RUNNING, message="running", supervisor_pid=7, mode="sandbox", why="root",
        memory_limits="enforced", workdir="/w", counted_restarts=1, started=1.5,
        completed=None,
        replicas=(
            LocalReplica(lc.ReplicaState("j-master-0", "Master", 0, lc.ACTIVE), pid=9),
            LocalReplica(
                lc.ReplicaState("j-worker-0", "Worker", 0, lc.ACTIVE), pid=10,
                fault=NetworkFault(Fault(PARTITION, "j-worker-0", seconds=20.0), heal_at=99.5),
            ),
            LocalReplica(
                lc.ReplicaState("j-worker-1", "Worker", 1, lc.ACTIVE), pid=11,
                fault=NetworkFault(Fault(SLOW, "j-worker-1", delay_ms=50, loss_percent=1.5), None),
            ),
        ),
        conditions=(
            lc.ConditionState(lc.CREATED, "Created", "made", 1.0),
            lc.ConditionState(lc.RUNNING, "Running", "runs", 2.0),
        ),
        started_groups=("Master", "Worker"),
    )  # fmt: skip
    assert LocalStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    body = status.to_json()
    body["startedGroups"] = ["Master", 3]
    with pytest.raises(ValueError, match="startedGroups"):
        LocalStatus.from_json(body)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"action": "kill"}, "'kill' is not a network fault"),
        ({"action": "heal"}, "'heal' is not a network fault"),
        ({"healAt": "soon"}, "'healAt' must be a finite number"),
        ({"delay_ms": -1}, "'delay_ms' must be a whole number"),
        ({"pod": None}, "'pod' must be a string"),
    ],
)
def test_a_network_fault_reads_back_only_as_the_supervisor_wrote_it(
    change: dict[str, object], problem: str
) -> None:
    replica = LocalReplica(
        lc.ReplicaState("j-worker-0", "Worker", 0, lc.ACTIVE),
        fault=NetworkFault(Fault(PARTITION, "j-worker-0", seconds=20.0), heal_at=99.5),
    )
    body = json.loads(json.dumps(replica.to_json()))
    body["fault"] |= change
    status = LocalStatus(
        state=lc.RUNNING, message="", supervisor_pid=7, mode="sandbox", why="root",
        memory_limits="enforced", workdir="/w", counted_restarts=0, started=1.5,
        completed=None, replicas=(),
    )  # fmt: skip
    with pytest.raises(ValueError, match=problem):
        LocalStatus.from_json(status.to_json() | {"replicas": [body]})


def test_a_network_fault_is_shown_with_when_it_heals() -> None:
    fault = NetworkFault(Fault(PARTITION, "j-worker-0", seconds=20.0), heal_at=time.time() + 20)
    shown = fault.describe()
    until = time.strftime("%H:%M:%S", time.localtime(fault.heal_at))
    assert shown == f"network fault (kctl-train chaos): cut off the network until {until}"
    fault = NetworkFault(Fault(SLOW, "j-worker-0", delay_ms=50, loss_percent=1.5), None)
    assert fault.describe() == (
        "network fault (kctl-train chaos): slowed (50 ms latency, 1.5% loss)"
    )


def start_keeper(record: Path, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", keeper.__name__, str(record), "--", *command],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


SPIN = "while :; do sleep 0.1; done"  # leaves no process behind once the shell exits


@pytest.mark.parametrize(
    ("command", "signum", "code"),
    [
        (["sh", "-c", "exit 3"], None, 3),
        # Passed on to the replica, as a shim does ({started}: the replica runs).
        (["sh", "-c", "touch {started}; exec sleep 30"], signal.SIGTERM, 143),
        (["sh", "-c", f"trap 'exit 0' TERM; touch {{started}}; {SPIN}"], signal.SIGTERM, 0),
        (["no-such-command-here"], None, 127),
    ],
)
def test_a_keeper_records_its_replicas_exit(
    tmp_path: Path, command: list[str], signum: int | None, code: int
) -> None:
    record, started = tmp_path / "exit.json", tmp_path / "started"
    kept = start_keeper(record, *(part.format(started=started) for part in command))
    try:
        if signum is not None:
            while not started.exists():
                time.sleep(0.05)
            time.sleep(0.1)  # the keeper sets its signals right after it starts the replica
            kept.send_signal(signum)
        assert kept.wait(timeout=20) == code
        assert exit_record.read(record, kept.pid) == code
        if code == 127:
            assert "cannot start no-such-command-here" in kept.stderr.read()  # type: ignore[union-attr]
    finally:
        kept.kill()
        kept.wait()


def test_a_keeper_is_followed_by_a_supervisor_that_is_not_its_parent(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    job.pod_dir("p-master-0").mkdir(parents=True)
    started, go = tmp_path / "started", tmp_path / "go"
    kept = start_keeper(
        job.exit_record("p-master-0"),
        "sh",
        "-c",
        f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 5",
    )
    try:
        while not started.exists():  # taken over once it runs, as a supervisor finds it
            assert kept.poll() is None, kept.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.05)
        pod = AdoptedPod.of(job, "p-master-0", kept.pid)
        assert pod.poll() is None
        go.touch()
        assert pod.wait() == 5  # from the record: the test, its parent, has not reaped it
    finally:
        kept.kill()
        kept.wait()
