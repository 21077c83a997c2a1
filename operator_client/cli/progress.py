"""Progress on long waits: a rich display on a terminal, plain lines otherwise.

Everything here writes to stderr, so stdout stays for what a script would capture.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from .console import colour

PLAIN_EVERY = 10.0  # seconds between plain progress lines


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


class StatusLine:
    """One line of state that is redrawn on a terminal and printed now and then otherwise."""

    def __init__(self) -> None:
        self._live: Any = None
        self._last_plain = ""
        self._last_time = time.monotonic()  # the first plain line after PLAIN_EVERY
        if colour():
            from rich.console import Console
            from rich.status import Status

            self._live = Status("", console=Console(stderr=True, highlight=False))
            self._live.start()

    def update(self, text: str, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(text)
            return
        now = time.monotonic()
        if text != self._last_plain and (force or now - self._last_time >= PLAIN_EVERY):
            print(text, file=sys.stderr, flush=True)
            self._last_plain, self._last_time = text, now

    def print(self, text: str) -> None:
        """A line that stays (a condition change), above the redrawn one."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class TransferDisplay:
    """collect's TransferProgress: a bar with bytes and rate on a terminal, else lines."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.files = self.done_files = 0
        self.total = self.done = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._last_line = self.started
        if colour():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._task = self._bar.add_task(label, total=0)
            self._bar.start()

    def add(self, files: int, total_bytes: int) -> None:
        with self._lock:
            self.files += files
            self.total += total_bytes
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = time.monotonic()
            line = self._bar is None and now - self._last_line >= PLAIN_EVERY
            if line:
                self._last_line = now
        if self._bar is not None:
            self._bar.update(self._task, advance=nbytes)
        elif line:
            print(
                f"{self.label}: {_mib(self.done)} of {_mib(self.total)}",
                file=sys.stderr,
                flush=True,
            )

    def file_done(self, key: str) -> None:
        with self._lock:
            self.done_files += 1
        if self._bar is not None:
            self._bar.update(
                self._task, description=f"{self.label} ({self.done_files}/{self.files} files)"
            )

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            return
        seconds = max(time.monotonic() - self.started, 1e-6)
        print(
            f"{self.label}: {self.done_files} files, {_mib(self.done)} in {seconds:.1f}s "
            f"({_mib(self.done / seconds)}/s)",
            file=sys.stderr,
            flush=True,
        )
