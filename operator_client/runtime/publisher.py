"""Checkpoint uploads off the training thread: rank 0 hands each save to one background
thread that commits it (runstore/checkpoints.py), in order."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from ..runstore.checkpoints import Manifest
from ..runstore.runinfo import Superseded

log = logging.getLogger("kctl_train.checkpoints")


class BackgroundPublisher:
    """Publishes checkpoints on one background thread, so training does not wait for
    uploads. Rank 0 only. Saves queue in order; `drain` waits for all of them."""

    def __init__(self, publish_fn: Callable[[dict[str, Path], int, int], Manifest]) -> None:
        self._publish = publish_fn
        self._queue: queue.Queue[tuple[dict[str, Path], int, int] | None] = queue.Queue()
        self.last: Manifest | None = None
        self.error: Exception | None = None
        # Set when a newer attempt exists: training must stop (runinfo.Superseded).
        self.superseded: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="checkpoint-publisher", daemon=True)
        self._thread.start()

    def submit(self, files: dict[str, Path], step: int, epoch: int) -> None:
        self._queue.put((files, step, epoch))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            files, step, epoch = item
            try:
                if self.superseded is None:
                    self.last = self._publish(files, step, epoch)
                    log.info("checkpoint step %d committed (%s)", step, self.last.key)
            except Superseded as exc:
                self.superseded = exc
                log.error("checkpoint step %d not committed: %s", step, exc)
            except Exception as exc:  # keep training; the next save retries the store
                self.error = exc
                log.warning("publishing checkpoint step %d failed: %s", step, exc)
            finally:
                self._queue.task_done()

    @property
    def pending(self) -> int:
        """Checkpoints submitted and not yet committed or failed."""
        return self._queue.unfinished_tasks

    def drain(self) -> None:
        """Wait until every submitted checkpoint is committed or has failed."""
        self._queue.join()

    def close(self) -> None:
        self.drain()
        self._queue.put(None)
        self._thread.join()
