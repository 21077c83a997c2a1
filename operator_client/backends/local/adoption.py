"""Taking over the pods a dead supervisor left running, as a training-operator that
restarts finds its job's pods still running and goes on from the status it wrote.

A pod sandbox's shim, and a process replica's keeper (pods/keeper.py), outlives its
supervisor and records its pod's exit (sandbox/exit_record.py), so a new supervisor can
follow the pod without being its parent: through a pidfd, which names that one process
even after its PID is reused. A replica started without one (by an earlier kctl-train)
is not taken over: re-applying ends it (orphans.py) and starts the job afresh."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from pathlib import Path

from ...controlplane import lifecycle as lc
from .jobdir import JobDir
from .sandbox import exit_record

# What a pod whose shim was killed itself (no record) is taken to have ended with: the
# kill. Popen's convention, as the supervisor's other pods report it.
KILLED = -signal.SIGKILL


class AdoptedPod:
    """A pod's shim that an earlier supervisor started, followed as the supervisor follows
    the ones it starts (subprocess.Popen's pid, poll, wait and send_signal)."""

    def __init__(self, pid: int, record: Path, pidfd: int | None) -> None:
        self.pid, self.record, self.pidfd = pid, record, pidfd
        self.returncode: int | None = None if pidfd is not None else self._recorded()

    @classmethod
    def of(cls, job: JobDir, name: str, pid: int) -> AdoptedPod:
        """The pod `name` of `job` whose shim had `pid`; already ended where that PID is
        gone or is no longer this pod's shim."""
        record = job.exit_record(name)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # ended (ProcessLookupError), or no pidfds here
            return cls(pid, record, None)
        if not _keeps_pod(pid, (job.pod_dir(name) / "pod.json", record)):
            os.close(pidfd)
            return cls(pid, record, None)
        return cls(pid, record, pidfd)

    def _recorded(self) -> int:
        code = exit_record.read(self.record, self.pid)
        return KILLED if code is None else code

    def poll(self) -> int | None:
        """The exit status if the shim has ended, else None."""
        if self.pidfd is not None and select.select([self.pidfd], [], [], 0)[0]:
            self._ended()
        return self.returncode

    def wait(self) -> int:
        """The exit status, once the shim has ended."""
        if self.pidfd is not None:
            select.select([self.pidfd], [], [])
            self._ended()
        assert self.returncode is not None  # set when the shim was seen to end
        return self.returncode

    def _ended(self) -> None:
        assert self.pidfd is not None
        os.close(self.pidfd)
        self.pidfd = None
        self.returncode = self._recorded()

    def close(self) -> None:
        """Stop following the pod (it goes on running)."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def send_signal(self, signum: int) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signum)


def _keeps_pod(pid: int, paths: tuple[Path, ...]) -> bool:
    """Whether `pid` runs the pod's shim or keeper: the one process started with one of
    `paths` (a sandbox's description, a keeper's record) as an argument (an exited
    process has no arguments)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(os.fsencode(path) in args for path in paths)


def running_pods(job: JobDir) -> list[str]:
    """The pods of a job whose supervisor died that still run and can be taken over:
    a job that had not ended, each active pod's shim (or keeper) still its own. Empty:
    nothing to take over (the job is applied afresh)."""
    try:
        local = job.local_status()
    except ValueError:  # not what a supervisor writes: nothing to go on from
        return []
    if local is None or local.state in lc.ENDED:
        return []
    alive = []
    for replica in local.replicas:
        if replica.state.phase == lc.ACTIVE and replica.pid:
            pod = AdoptedPod.of(job, replica.state.name, replica.pid)
            if pod.poll() is None:
                alive.append(replica.state.name)
            pod.close()
    return alive
