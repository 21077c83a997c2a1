"""Following a job to its end in the terminal: new conditions and replica problems as
lines, one redrawn status line (or every replica's log lines), and Ctrl-C as a stop with
an emergency checkpoint (twice: a kill)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from ..client import ConditionReached, JobChanged, ProgressReport, ReplicaNote
from ..client.store_words import LiveWords
from ..contract import Progress
from ..errors import KctlTrainError, WaitTimeout
from . import console
from .progress import StatusLine

if TYPE_CHECKING:
    from ..client import Event, JobHandle, JobView


class _Display:
    """The live view of a followed job: new conditions and replica problems as lines,
    one redrawn status line (state, replicas, progress, time)."""

    def __init__(self, handle: JobHandle, status_line: bool) -> None:
        self.name = handle.name
        self.goodput = LiveWords(handle)
        self.line = StatusLine() if status_line else None
        self.progress: Progress | None = None
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if self.line is not None:
            self.line.print(text)
        else:
            console.info(text)

    def __call__(self, event: Event) -> None:
        if isinstance(event, ConditionReached):
            self.say(f"{event.condition.type}: {event.condition.message}")
        elif isinstance(event, ReplicaNote):
            self.say(f"{event.pod}: {event.text}")
        elif isinstance(event, ProgressReport):
            self.progress = event.progress
        elif isinstance(event, JobChanged) and self.line is not None:
            self.line.update(self._summary(event.view))

    def _summary(self, view: JobView) -> str:
        pods = "  ".join(
            f"{r.tag} {r.phase}" + (f" ({r.restarts} restarts)" if r.restarts else "")
            for r in view.replicas
        )
        progress = self.progress.text() if self.progress else "starting"
        elapsed = time.monotonic() - self.started
        goodput = self.goodput.poll() if self.progress else ""
        parts = [view.state, pods or "no pods yet", progress, goodput, f"{elapsed:.0f}s"]
        return " · ".join(p for p in parts if p)

    def stop(self) -> None:
        if self.line is not None:
            self.line.stop()


def follow(handle: JobHandle, *, logs: bool, timeout: float | None) -> JobView | None:
    """Follow the job to its end, showing it as it goes (logs: every replica's lines);
    its final view, or None when `timeout` passed first. Ctrl-C stops a job the backend
    can stop (an emergency checkpoint first; Ctrl-C again kills it)."""
    display = _Display(handle, status_line=not logs)
    printer = None
    if logs:
        printer = threading.Thread(target=_print_logs, args=(handle,), daemon=True)
        printer.start()
    try:
        return handle.wait(timeout=timeout, on_event=display)
    except WaitTimeout:
        return None
    except KeyboardInterrupt:
        display.stop()
        if not handle.stop():
            raise
        console.info(
            "\nstopping the job: the replicas commit an emergency checkpoint "
            "(Ctrl-C again to kill now)"
        )
        try:
            return handle.wait()
        except KeyboardInterrupt:
            handle.stop(force=True)
            return handle.wait(timeout=30)
    finally:
        display.stop()
        if printer is not None:
            printer.join(timeout=5)


def _print_logs(handle: JobHandle) -> None:
    try:
        for line in handle.logs(follow=True):
            print(f"[{line.tag}] {line.text}", flush=True)
    except KctlTrainError as exc:
        console.warning(f"log stream ended: {exc}")
