"""The runtime's side of goodput: each rank's events (runstore/events.py), buffered and
written to the store by a thread, off the training thread's way (step_profiler.py times the
training loop). No torch or Lightning here: the worker records its first event before it
imports them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..runstore import events
from ..storage import ObjectStore

FLUSH_SECONDS = 10.0


class EventLog:
    """One rank's events, buffered; written to the store (whole, the file is small) by a
    thread as soon as the attempt is known, then every `every` seconds, and at close()."""

    def __init__(
        self, rank: int, clock: Callable[[], float] = time.time, every: float = FLUSH_SECONDS
    ) -> None:
        self.rank, self.clock, self.every = rank, clock, every
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.writing = threading.Lock()  # one flush at a time: the newest copy lands last
        self.store: ObjectStore | None = None
        self.attempt = 0
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def exited(self) -> bool:
        return any(e["event"] == "exit" for e in self.events[-1:])

    def record(self, event: str, at: float | None = None, **fields: Any) -> None:
        """Note `event` with `fields`, as of now (or of the wall-clock time `at`)."""
        entry = {"t": round(self.clock() if at is None else at, 6), "event": event, **fields}
        with self.lock:
            self.events.append(entry)

    def bind(self, store: ObjectStore, attempt: int) -> None:
        """Write to `store` as `attempt` from now on (the events so far included)."""
        self.store, self.attempt = store, attempt
        self.thread = threading.Thread(target=self._run, name="goodput-events", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # The attempt's start at once: a pod killed before the next flush (a node lost)
        # still leaves when it began, and the account does not take it for container start.
        self.flush()
        while not self.stopped.wait(self.every):
            self.flush()

    def flush_soon(self) -> None:
        """Write the events now, on a thread of its own (the caller must not wait on the
        store: a SIGTERM's grace period is running)."""
        threading.Thread(target=self.flush, name="goodput-events-now", daemon=True).start()

    def flush(self) -> None:
        if self.store is None:
            return
        with self.writing:
            with self.lock:
                data = events.dumps(self.events)
            # A store that fails now fails the checkpoints too, which say so; the account
            # is not worth failing a training run for.
            with contextlib.suppress(Exception):
                self.store.put_bytes(events.key(self.attempt, self.rank), data)

    def close(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
        self.flush()
