"""Writing checkpoints off the training thread: one save in flight per rank, each rank
writing its share (snapshot.py) with torch.distributed.checkpoint, then recording it with a
part record; rank 0 commits once every part is in the store (runstore/checkpoints.py).
Into a file:// store DCP writes straight to the checkpoint's directory (uncommitted until
the manifest names the files); for any other store into the rank's scratch, then uploaded.
The DCP planning and gathering run on a gloo group of their own, so they never interleave
with the training thread's collectives.
Two hooks (WriterConfig's before_write and before_upload) let a rehearsal slow a save
down at those points (rehearsal.py); they do nothing by default.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import checkpoint_name
from ..runstore import checkpoint_log, checkpoints
from ..runstore.metrics import KEY as METRICS_KEY
from ..runstore.runinfo import Superseded
from ..storage import ObjectStore
from .checkpoint_format import METADATA
from .snapshot import Share

log = logging.getLogger("kctl_train.checkpoints")
WAIT_POLL = 0.2  # seconds between a waiter's questions whether to give a commit up


@dataclass
class SaveRequest:
    share: Share
    stall: float  # seconds the training thread spent on this save
    emergency: bool = False
    skipped: int = 0  # saves skipped since the last one (checkpoint.whenBusy: skip)
    metrics: Path | None = None  # rank 0: the metrics log so far, uploaded with the commit
    scores: dict[str, float] = field(default_factory=dict)  # its metrics, into its manifest


@dataclass(frozen=True)
class WriterConfig:
    store: ObjectStore
    rank: int
    world_size: int
    attempt: int
    scratch: Path
    writers: list[int]  # the ranks whose parts make a checkpoint
    keep: int
    group: Any = None  # the gloo group DCP plans and gathers on
    fence: Callable[[], None] = lambda: None
    before_write: Callable[[], None] = lambda: None  # a rehearsal's wait (rehearsal.py)
    before_upload: Callable[[], None] = lambda: None
    verified: checkpoints.Verified | None = None
    best: checkpoints.Best | None = None  # which checkpoints retention keeps for a metric


def _cause(exc: BaseException) -> str:
    """What went wrong, in one line: for DCP's exception gathered from several ranks, the
    first underlying error of each (a full disk, a refused write)."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        found = [(rank, v[0] if isinstance(v, tuple) else v) for rank, v in failures.items()]
        return "; ".join(f"rank {rank}: {type(e).__name__}: {e}" for rank, e in sorted(found))
    return f"{type(exc).__name__}: {exc}"


class CheckpointWriter:
    """Saves checkpoints on one background thread per rank, one at a time."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.last: checkpoints.Manifest | None = None
        self.error: Exception | None = None  # the newest save's failure, if it failed
        # Set when a newer attempt exists: training must stop (runinfo.Superseded).
        self.superseded: Exception | None = None
        # The step of this rank's newest save that failed (-1: none), and the newest one
        # some rank said failed: rank 0 stops waiting for that step's parts.
        self.failed_step = -1
        self._abandoned_step = -1
        self._log: list[dict[str, str]] = (
            checkpoint_log.read(config.store) if config.rank == 0 else []
        )
        # Rank 0: what an emergency save needs on this job, from every save so far (earlier
        # attempts' included); None before the first.
        self.budget = checkpoint_log.budget(self._log)
        self._request: SaveRequest | None = None
        self._closing = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._changed:
            return self._request is not None

    def submit(self, request: SaveRequest) -> None:
        with self._changed:
            assert self._request is None, "one save in flight at a time"
            self._request = request
            self._changed.notify_all()

    def abandon(self, step: int) -> None:
        """Some rank's save of `step` failed: its part will never come."""
        self._abandoned_step = max(self._abandoned_step, step)

    def wait(self, give_up: Callable[[], bool] | None = None) -> None:
        """Until the save in flight (if any) is committed, or has failed; once `give_up()`
        (asked every WAIT_POLL seconds) is true, its commit stops waiting for parts."""
        with self._changed:
            while not self._changed.wait_for(lambda: self._request is None, WAIT_POLL):
                if give_up is not None and self._request is not None and give_up():
                    self.abandon(self._request.share.step)

    def close(self) -> None:
        self.wait()
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._request is not None or self._closing)
                request = self._request
            if request is None:
                return
            try:
                self._save(request)
                # The newest save's outcome is what counts: an earlier failure (a store
                # outage since over) must not fail the final checkpoint.
                self.error = None
            except Superseded as exc:
                self.superseded = exc
                log.error("checkpoint step %d not committed: %s", request.share.step, exc)
            except BaseException as exc:  # keep training; the next save tries again
                # (DCP's CheckpointException is a BaseException: a thread must not die of it.)
                self.error = exc if isinstance(exc, Exception) else RuntimeError(_cause(exc))
                self.failed_step = request.share.step
                log.warning("checkpoint step %d failed: %s", request.share.step, _cause(exc))
            finally:
                with self._changed:
                    self._request = None
                    self._changed.notify_all()

    def _save(self, request: SaveRequest) -> None:
        import torch.distributed.checkpoint as dcp

        config, share = self.config, request.share
        started = time.monotonic()
        config.before_write()
        in_place = config.store.local_path(checkpoints.checkpoint_key(share.step))
        if in_place is not None and config.rank not in config.writers:
            in_place = None  # its share is not one the commit takes: only scratch sees it
        local = in_place or config.scratch / "checkpoints" / checkpoint_name(share.step)
        if in_place is None:
            shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True, exist_ok=True)
        # Collective on every rank (DCP plans and gathers on `group`), whatever happens.
        metadata = dcp.save(
            share.items,
            storage_writer=dcp.FileSystemWriter(str(local), sync_files=in_place is not None),
            process_group=config.group,
        )
        config.before_upload()
        if config.rank in config.writers:
            # This rank's files: where DCP put the items of its share (and rank 0's metadata).
            names = {
                info.relative_path
                for index, info in metadata.storage_data.items()
                if index.fqn in share.items
            } | ({METADATA} if config.rank == 0 else set())
            checkpoints.publish_part(
                config.store,
                {name: local / name for name in names if (local / name).is_file()},
                step=share.step,
                rank=config.rank,
                attempt=config.attempt,
                seconds=time.monotonic() - started,
            )
        if in_place is None:
            shutil.rmtree(local, ignore_errors=True)
        if config.rank == 0:
            self._commit(request, time.monotonic())

    def _commit(self, request: SaveRequest, waited_from: float) -> None:
        config, share = self.config, request.share
        parts = checkpoints.gather_parts(
            config.store, share.step, config.attempt, config.writers,
            abandoned=lambda: self._abandoned_step >= share.step,
        )  # fmt: skip
        timings = {
            "stall": round(request.stall, 4),
            "write": round(max(p.seconds for p in parts), 4),
            "commit": round(time.monotonic() - waited_from, 4),
        }
        self.last = checkpoints.commit(
            config.store, parts, step=share.step, epoch=share.epoch, attempt=config.attempt,
            world_size=config.world_size, keep=config.keep, fmt=checkpoints.DCP,
            timings=timings, fence=config.fence, verified=config.verified,
            scores=request.scores, best=config.best,
        )  # fmt: skip
        if request.metrics is not None:
            config.store.put_file(METRICS_KEY, request.metrics)
            request.metrics.unlink(missing_ok=True)
        row = {
            "step": share.step,
            "epoch": share.epoch,
            "attempt": config.attempt,
            "emergency": int(request.emergency),
            "skipped_before": request.skipped,
            "bytes": sum(m.size for m in self.last.members),
            "stall_s": timings["stall"],
            "write_s": timings["write"],
            "commit_s": timings["commit"],
        }
        self._log.append({k: str(v) for k, v in row.items()})
        checkpoint_log.write(config.store, self._log)
        self.budget = checkpoint_log.budget(self._log)
        if self.budget is not None:
            config.store.put_bytes(checkpoint_log.BUDGET_KEY, self.budget.to_json())
        log.info(
            "checkpoint step %d committed (%s): stalled %.3fs, written in %.2fs, committed %.2fs"
            " later",
            share.step, self.last.key, timings["stall"], timings["write"], timings["commit"],
        )  # fmt: skip
