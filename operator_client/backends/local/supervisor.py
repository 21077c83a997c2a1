"""The local backend's supervisor: one detached process per local job that runs its
replicas as processes and applies the operator's lifecycle rules (lifecycle.py) to them.

Started by `kctl-train apply --local` as `python -m operator_client.backends.local JOB_DIR`
(__main__.py); it outlives the command so that `status`, `logs` and `delete` work from any
terminal. SIGTERM stops the job gracefully (like deleting its pods: SIGTERM to each
replica, SIGKILL after terminationGracePeriodSeconds); SIGINT kills at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...contract import TERMINATION_LOG_ENV
from ...controlplane import lifecycle as lc
from ...controlplane.crash_loop import CrashLoop, next_restart
from ...controlplane.pod_env import PodEnvError
from ...controlplane.pod_plan import JobPlan, plan_of
from ...errors import LocalJobError
from ...untrusted import read_tail
from ..types import StorageLocation
from . import chaos, eviction, file_store, pod_processes
from .adoption import AdoptedPod
from .jobdir import JobDir, LocalReplica, LocalStatus, write_json
from .pods.base import PodProcess, Pods
from .pods.launch import load_mode, pods_for
from .sandbox.podspec import ephemeral_limit

POLL_SECONDS = 0.2
# A replica restarted in place waits as under the kubelet (crash_loop.py): the first time
# not at all, then 1 s doubling up to 30 s (the kubelet: 10 s to 5 min); FIRST,MAX seconds
# in this variable change it (a quick rehearsal of a backoff limit).
RESTART_DELAY = (1.0, 30.0)
RESTART_BACKOFF_ENV = "KCTL_TRAIN_LOCAL_RESTART_BACKOFF"


def restart_delays(env: Mapping[str, str]) -> tuple[float, float]:
    """The first and longest wait before a restart; ValueError for a malformed setting."""
    text = env.get(RESTART_BACKOFF_ENV)
    if not text:
        return RESTART_DELAY
    malformed = ValueError(
        f"{RESTART_BACKOFF_ENV}={text!r}: use FIRST,MAX seconds with FIRST <= MAX (e.g. 0.5,10)"
    )
    first, _, longest = text.partition(",")
    try:
        delays = float(first), float(longest or first)
    except ValueError:
        raise malformed from None
    if not 0 <= delays[0] <= delays[1] < float("inf"):
        raise malformed
    return delays


# After the job succeeded, replicas that are finishing on their own get this long.
SETTLE_SECONDS = 3.0


class Supervisor:
    def __init__(self, job: JobDir, env: Mapping[str, str]) -> None:
        self.job = job
        self.manifest = job.manifest()
        self.plan = plan_of(job.workload(self.manifest))  # what every pod runs, built once
        self.policy = lc.Policy.of(self.plan.workload)
        self.replicas = {r.name: r for r in lc.replicas_of(self.plan.workload)}
        self.procs: dict[str, PodProcess] = {}
        self.restart_at: dict[str, float] = {}
        # In memory, as the kubelet's: a supervisor that takes over starts them afresh.
        self.crash_loops: dict[str, CrashLoop] = {}
        self.conditions: list[lc.ConditionState] = []
        self.detail = ""  # kctl-train's own line beyond the last condition's message
        self.started_groups: list[str] = []
        self.counted_restarts = 0
        self.started = time.time()
        self.first_started: dict[str, float] = {}  # replica -> its process's first start
        self.completed: float | None = None
        self.env = dict(env)
        self.delays = restart_delays(env)
        self.pods: Pods | None = None
        self.mode = load_mode(job)[0]
        self.stop_requested = False
        self.kill_requested = False
        self._written: dict[str, Any] | None = None
        self.run_dir, self.storage_limit = _storage_budget(self.plan, env)
        self.measure_at = 0.0

    # signals

    def _on_term(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def _on_int(self, signum: int, frame: object) -> None:
        self.stop_requested = self.kill_requested = True

    # the job

    def run(self) -> int:
        """Supervise the job to its end; returns 0 (the job's outcome is in its status).
        Whatever goes wrong in the supervisor itself fails the job with the reason and
        ends its replicas: a job never stays Pending or Running with nobody watching."""
        lock = self.job.hold_lock()
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_int)
        try:
            # A status here already is a dead supervisor's: its pods are taken over.
            previous = self.job.local_status()
            if previous is not None:
                os.chdir(previous.workdir)
            self.pods = pods_for(self.job, self.plan, previous)
            self._supervise(previous)
        except Exception as exc:
            self._finish(lc.FAILED, "SupervisorError", f"the local supervisor failed: {exc!r}")
            pod_processes.kill_all(pod_processes.job_prefix(self.job.path))
            self._write()
            raise
        finally:
            if self.pods is not None:
                self.pods.close()
            os.close(lock)
        return 0

    def _supervise(self, previous: LocalStatus | None) -> None:
        if previous is not None:
            self._take_over(previous)
        else:
            self._condition(lc.CREATED, *lc.words(self.policy, "created"))
            if not self._start_due_groups():
                return
            self._condition(lc.RUNNING, *lc.words(self.policy, "running"))
            if not self.replicas:  # numNodes 0: Jobs without pods complete at once
                self._finish(lc.SUCCEEDED, *lc.words(self.policy, "succeeded"))
        while not self._finished():
            self._reap()
            if not self._start_due_groups():
                return
            self._restart_due()
            self._check_deadline()
            self._check_storage()
            self._faults()
            if self.stop_requested and not self._finished():
                self._finish(lc.SUSPENDED, "Stopped", self._stop_reason())
            self._write()
            time.sleep(POLL_SECONDS)
        self._clean_up()
        self._write()

    def _take_over(self, previous: LocalStatus) -> None:
        """Go on from what a dead supervisor last wrote, following its running pods
        instead of starting them again; one it was about to restart is restarted now."""
        self.conditions = list(previous.conditions)
        self.counted_restarts = previous.counted_restarts
        self.started = previous.started
        self.started_groups = list(previous.started_groups)
        for local in previous.replicas:
            replica, name = local.state, local.state.name
            if name not in self.replicas:
                continue
            self.replicas[name] = replica
            if local.first_started is not None:
                self.first_started[name] = local.first_started
            if replica.phase == lc.ACTIVE and local.pid:
                self.procs[name] = AdoptedPod.of(self.job, name, local.pid)
                self._note(name, f"a new local supervisor took over this pod (pid {local.pid})")
            elif replica.phase == lc.PENDING and replica.type in self.started_groups:
                self.restart_at[name] = time.monotonic()

    def _start_due_groups(self) -> bool:
        """Start the pods of every group whose dependsOn now holds (a TrainJob's
        initializers before its trainer; a PyTorchJob's all at once). False when one
        could not start: the job has failed, its replicas are ended."""
        try:
            for group in lc.startable(
                self.plan.groups, self.replicas.values(), self.started_groups
            ):
                self.started_groups.append(group)
                for replica in self.replicas.values():
                    if replica.type == group:
                        self._start(replica)
        except (PodEnvError, OSError, ValueError) as exc:
            self._finish(lc.FAILED, "InvalidReplica", f"cannot start a replica: {exc}")
            self._terminate(list(self.procs))
            self._write()
            return False
        return True

    def _finished(self) -> bool:
        return lc.job_state(self.conditions) in lc.ENDED

    def _stop_reason(self) -> str:
        try:
            reason = self.job.stop_file.read_text().strip()
        except FileNotFoundError:
            reason = ""
        return reason or "stopped by a signal"

    def _condition(self, type_: str, reason: str, message: str) -> None:
        self.conditions = lc.set_condition(self.conditions, type_, reason, message, time.time())

    def _finish(self, type_: str, reason: str, message: str) -> None:
        self._condition(type_, reason, message)
        self.restart_at.clear()
        self.completed = time.time()

    # replicas

    def _start(self, replica: lc.ReplicaState) -> None:
        assert self.pods is not None
        # The container's terminationMessagePath: the runtime writes why it failed there.
        termination = self.job.termination_log(replica.name)
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.unlink(missing_ok=True)
        extra = {
            # Every process of the replica carries this, however it re-parents.
            pod_processes.MARKER: pod_processes.marker_of(self.job.path, replica.name),
            TERMINATION_LOG_ENV: str(termination),
        }
        command, env = self.pods.launch(replica, self.env, extra)
        log = self.job.log(replica.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.procs[replica.name] = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the container's processes
            )
        self.pods.started(self.procs[replica.name].pid)
        self.first_started.setdefault(replica.name, time.time())
        self.replicas[replica.name] = replace(replica, phase=lc.ACTIVE)

    def _faults(self) -> None:
        """Apply fault requests (`kctl-train chaos`) and heal timed ones that are over."""
        assert self.pods is not None
        for path, fault in chaos.pending(self.job):
            try:
                done = self.pods.fault(fault)
            except (ValueError, OSError) as exc:
                chaos.answer(path, False, str(exc))
                continue
            self._note(fault.pod, f"fault injected: {done}")
            chaos.answer(path, True, done)
        for name in self.pods.due():
            self._note(name, "fault over: network restored")

    def _note(self, name: str, text: str) -> None:
        with self.job.log(name).open("a") as fh:
            fh.write(f"--- kctl-train local: {text} ---\n")

    def _kill(self, name: str) -> None:
        """SIGKILL every process of a replica: its group, and every process that carries
        its marker (torchrun's workers run in sessions of their own)."""
        proc = self.procs.get(name)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        left = pod_processes.kill_all(pod_processes.marker_of(self.job.path, name), exact=True)
        if left:
            self._note(name, f"processes {left} did not end after SIGKILL")

    def _ended(self, name: str, returncode: int) -> lc.ReplicaState:
        self._kill(name)  # the container's processes go with it, wherever they are
        self.procs.pop(name)
        code = lc.exit_status(returncode)
        phase = lc.DONE if code == 0 else lc.CRASHED
        message = self._termination_message(name) if code else None
        replica = replace(self.replicas[name], phase=phase, exit_code=code, message=message)
        self.replicas[name] = replica
        return replica

    def _termination_message(self, name: str) -> str | None:
        """What the replica wrote to its termination log (the kubelet's terminated.message)."""
        try:  # the pod wrote it: a regular file, read from its end only
            text = read_tail(self.job.termination_log(name), 4096).decode(errors="replace")
        except OSError:
            return None
        return text.strip()[-1024:] or None

    def _reap(self) -> None:
        assert self.pods is not None
        for name, proc in list(self.procs.items()):
            returncode = proc.poll()
            if returncode is None:
                continue
            replica = self._ended(name, returncode)
            if self._finished():
                continue
            decision = lc.on_exit(
                self.policy,
                self.replicas.values(),
                replica,
                replica.exit_code or 0,
                self.counted_restarts,
            )
            if not decision.in_place:  # ended for good, or made anew: a new pod
                self.pods.removed(name)
            if decision.restart:
                self.counted_restarts += decision.counted
                restarts, now, delay = replica.restarts + 1, time.monotonic(), 0.0
                if decision.in_place:
                    loop = self.crash_loops.get(name, CrashLoop())
                    delay, self.crash_loops[name] = next_restart(loop, now, *self.delays)
                self.replicas[name] = replace(replica, restarts=restarts, phase=lc.PENDING)
                self.restart_at[name] = now + delay
                when = f"in {delay:g}s" if delay else "now"
                self._note(name, f"exited with code {replica.exit_code}; restart {restarts} {when}")
            if decision.condition in lc.ENDED:
                message, detail = decision.message, decision.detail
                if replica.message and detail:  # a TrainJob: its condition is JobSet's
                    detail += f": {replica.message}"
                elif replica.message:
                    message += f" {name}: {replica.message}"
                self.detail = detail
                self._finish(decision.condition or "", decision.reason, message)
            elif decision.condition:
                self._condition(decision.condition, decision.reason, decision.message)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for name, due in sorted(self.restart_at.items()):
            if due <= now:
                del self.restart_at[name]
                try:
                    self._start(self.replicas[name])
                except (PodEnvError, OSError) as exc:
                    self._finish(lc.FAILED, "InvalidReplica", f"cannot restart {name}: {exc}")
                    return
        if not self.restart_at and lc.job_state(self.conditions) == lc.RESTARTING:
            self._condition(lc.RUNNING, *lc.words(self.policy, "running"))

    def _check_deadline(self) -> None:
        decision = lc.deadline_exceeded(self.policy, self.started, time.time())
        if decision is not None and not self._finished():
            self._finish(decision.condition or lc.FAILED, decision.reason, decision.message)

    def _check_storage(self) -> None:
        """Evict the job's pods once they wrote more into its run directory than their
        ephemeral-storage limits allow (eviction.py)."""
        now = time.monotonic()
        if self.run_dir is None or now < self.measure_at or self._finished():
            return
        self.measure_at = now + eviction.EVERY_SECONDS
        used = eviction.usage(self.run_dir, self.storage_limit)
        message = eviction.eviction(used, self.storage_limit, self.run_dir)
        if message is not None:
            self._finish(lc.FAILED, "Evicted", message)
            self._terminate(list(self.procs))

    def _terminate(self, names: list[str], settle: float = 0.0) -> None:
        """Stop replicas as pod deletion does: SIGTERM to the main process, SIGKILL to
        all of its processes after the grace period (at once after a second Ctrl-C)."""
        deadline = time.monotonic() + settle
        while settle and time.monotonic() < deadline and any(n in self.procs for n in names):
            self._reap()
            time.sleep(POLL_SECONDS)
        for name in names:
            if name in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    self.procs[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.policy.grace_seconds
        while any(n in self.procs for n in names) and time.monotonic() < deadline:
            if self.kill_requested:
                break
            self._reap()
            self._write()
            time.sleep(POLL_SECONDS)
        for name in names:
            if name in self.procs:
                self._kill(name)
                self._ended(name, self.procs[name].wait())

    def _clean_up(self) -> None:
        """What cleanPodPolicy leaves running is left running; a stop ends everything."""
        assert self.pods is not None
        state = lc.job_state(self.conditions)
        running = list(self.procs)
        if state == lc.SUSPENDED or self.policy.clean_pods in ("Running", "All"):
            self._terminate(running, settle=SETTLE_SECONDS if state == lc.SUCCEEDED else 0.0)
        else:
            self._write()
            while self.procs and not self.stop_requested:  # cleanPodPolicy None
                self._reap()
                self._write()
                time.sleep(POLL_SECONDS)
            self._terminate(list(self.procs))
        for name in self.replicas:  # the pods go, their emptyDirs with them
            self.pods.removed(name)
            shutil.rmtree(self.job.pod_dir(name), ignore_errors=True)

    # status

    def status(self) -> dict[str, Any]:
        """The status.json body: the job's status as its operator writes it, plus local
        detail (the state and message of every kind, from the shared state machine)."""
        meta = self.manifest["metadata"]
        return {
            "apiVersion": self.manifest["apiVersion"],
            "kind": self.manifest["kind"],
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", "default")},
            "status": lc.status_body(
                self.policy, self.conditions, self.replicas.values(), self.started, self.completed
            ),
            "local": self.local_status().to_json(),
        }

    def local_status(self) -> LocalStatus:
        """What the supervisor knows beyond the operator's status."""
        mode, pods = self.mode, self.pods
        return LocalStatus(
            state=lc.job_state(self.conditions),
            message=": ".join(m for m in (self._last_message(), self.detail) if m),
            supervisor_pid=os.getpid(),
            mode=mode.mode,
            why=mode.why,
            memory_limits=mode.memory,
            port=pods.port if pods else None,
            workdir=os.getcwd(),
            counted_restarts=self.counted_restarts,
            started=self.started,
            completed=self.completed,
            conditions=tuple(self.conditions),
            started_groups=tuple(self.started_groups),
            replicas=tuple(
                LocalReplica(
                    r,
                    pid=self.procs[r.name].pid if r.name in self.procs else None,
                    log=str(self.job.log(r.name)),
                    address=pods.where(r.name)[0] if pods else None,
                    netns=pods.where(r.name)[1] if pods else None,
                    # No scheduler and no image pull here: a replica is made when the
                    # supervisor starts, and waits only for its group's turn.
                    created=self.started,
                    first_started=self.first_started.get(r.name),
                    fault=pods.network_fault(r.name) if pods else None,
                )
                for r in self.replicas.values()
            ),
        )

    def _last_message(self) -> str:
        return self.conditions[-1].message if self.conditions else ""

    def _write(self) -> None:
        body = self.status()
        if body != self._written:
            write_json(self.job.status_file, body)
            self._written = body


def _storage_budget(plan: JobPlan, env: Mapping[str, str]) -> tuple[Path | None, int]:
    """The job's run directory on this machine's disk (None: its store is not file://)
    and the bytes its pods may write there: the sum of their ephemeral-storage limits."""

    location = StorageLocation.of(plan.workload.manifest)
    roots = file_store.roots(location.root) if location else None
    limit = sum(ephemeral_limit(pod, env) for pod in plan.pods)
    return (roots[1] if roots else None), limit


def start_supervisor(job: JobDir) -> None:
    """Start the job's supervisor here (the pods' working directory) and wait for its
    first status (where a status is there already: until it holds the job's lock)."""
    with job.supervisor_log.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "operator_client.backends.local", str(job.path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command and its terminal's Ctrl-C
        )
    deadline = time.monotonic() + 30
    while not (job.status() and job.supervisor_alive()):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = job.supervisor_log.read_text(errors="replace")[-2000:]
            raise LocalJobError(f"the local supervisor did not start:\n{tail}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Entry point: `python -m operator_client.backends.local JOB_DIR`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m operator_client.backends.local JOB_DIR", file=sys.stderr)
        return 2
    return Supervisor(JobDir(Path(args[0])), os.environ).run()
