"""Why a job did not succeed, the same for every backend: its state and reason, and the
last log lines of the replica that failed first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..backends.types import JobView, LogLine, Replica
from ..controlplane import lifecycle as lc
from ..errors import KctlTrainError

# How many of a failed replica's last log lines a report shows.
FAILED_LOG_LINES = 20


@dataclass(frozen=True)
class FailureReport:
    state: str
    message: str
    replica: Replica | None = None  # the replica that failed (None: none did, or stopped)
    lines: list[str] = field(default_factory=list)  # its last log lines
    log_problem: str | None = None  # why its log could not be read

    @property
    def stopped(self) -> bool:
        """Stopped on purpose (Ctrl-C, delete): its committed checkpoints resume it."""
        return self.state == lc.SUSPENDED


# A job's log reader: (replica=, previous=, tail=) -> lines (Backend.logs, bound to a job).
LogReader = Callable[..., Iterator[LogLine]]


def failure_report(view: JobView, read_logs: LogReader) -> FailureReport | None:
    """None for a job that succeeded."""
    if view.succeeded:
        return None
    failing = [
        r
        for r in view.replicas
        if r.phase == "Failed" or r.exit_code not in (None, 0) or r.restarts
    ]
    if view.state == lc.SUSPENDED or not failing:
        return FailureReport(view.state, view.message)
    replica = failing[0]
    try:
        logs = read_logs(
            replica=replica.tag,
            # A replica that restarted and runs again: the run that failed is the previous.
            previous=replica.restarts > 0 and replica.phase != "Failed",
            tail=FAILED_LOG_LINES,
        )
        return FailureReport(view.state, view.message, replica, [line.text for line in logs])
    except KctlTrainError as exc:
        return FailureReport(view.state, view.message, replica, log_problem=str(exc))
