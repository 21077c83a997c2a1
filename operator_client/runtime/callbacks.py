"""The Lightning callbacks of the runtime, one job each: checkpoints (and the stop on
SIGTERM they end with), per-rank outputs, progress lines. They share one RunAttempt."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from ..contract import Progress
from ..runstore import checkpoints, runinfo
from ..runstore.metrics import merge as merge_metrics
from ..runstore.outputs import RankOutputs, commit_epoch
from ..spec.model import TrainingJob
from ..storage import ObjectStore
from .async_checkpoint import CheckpointWriter, SaveRequest, WriterConfig
from .checkpoint_format import RNG_KEY, restore_rng
from .context import World
from .snapshot import Snapshotter

log = logging.getLogger("kctl_train.runtime")

# Every this many batches the ranks agree (one small all-reduce) on whether any of them
# was told to stop (SIGTERM) and, for wall-time intervals, whether a checkpoint is due.
AGREE_EVERY = 10

# Set by the worker's SIGTERM handler; read at the next agreement point.
PREEMPTED = threading.Event()


class Preempted(Exception):
    """Raised on every rank, at the same batch, after the emergency checkpoint."""


@dataclass(frozen=True)
class RunAttempt:
    """This worker's attempt of the run: where it writes, and the collectives (on the
    gloo control group) its callbacks agree through."""

    store: ObjectStore
    attempt: int
    world: World
    control: Any

    def fence(self) -> None:
        """Raise runinfo.Superseded once a newer attempt of the run exists."""
        runinfo.fence(self.store, self.attempt)

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def barrier(self) -> None:
        dist.barrier(group=self.control)


class CheckpointCallback(L.Callback):
    """Saves every checkpoint.every (steps or wall time) from a point-in-time snapshot:
    the training thread only copies its share (snapshot.py), the writer thread writes and
    commits it (async_checkpoint.py). A save that comes while the previous one is still
    being written waits for it or is skipped (checkpoint.whenBusy), the same on every rank.
    On SIGTERM every rank saves, waits for the commit, then stops (Preempted)."""

    def __init__(
        self,
        job: TrainingJob,
        run: RunAttempt,
        scratch: Path,
        resumed_step: int,
        history: Path | None = None,
        verified: checkpoints.Verified | None = None,
        writers: list[int] | None = None,
        group: Any = None,
    ) -> None:
        self.job, self.run, self.scratch = job, run, scratch
        self.world, self.store = run.world, run.store
        policy = job.spec.checkpoint
        self.every_steps, self.every_seconds = policy.every.steps, policy.every.seconds
        self.when_busy = policy.when_busy
        self.last_saved_step = resumed_step
        self.last_save_time = time.monotonic()
        self.first_step = resumed_step
        # The metrics log of earlier attempts (rank 0), continued by this one.
        self.history = history
        self.skipped = 0
        self.prepared = False
        writers = list(range(run.world.world_size)) if writers is None else writers
        self.snapshotter = Snapshotter(run.world.rank, len(writers))
        self.writer = CheckpointWriter(
            WriterConfig(
                store=run.store,
                rank=run.world.rank,
                world_size=run.world.world_size,
                attempt=run.attempt,
                scratch=scratch,
                writers=writers,
                keep=policy.keep,
                group=group,
                fence=run.fence,
                verified=verified or checkpoints.Verified(run.store, scratch),
            )
        )

    def metrics_file(self, trainer: L.Trainer) -> Path | None:
        """Rank 0's metrics log of the whole run so far: earlier attempts' rows, then
        this attempt's (flushed)."""
        if self.world.rank != 0 or trainer.logger is None:
            return None
        trainer.logger.save()
        current = Path(trainer.logger.log_dir or "") / "metrics.csv"
        return merge_metrics(
            self.history,
            current if current.is_file() else None,
            self.scratch / "metrics-merged.csv",
            self.first_step,
        )

    def _metrics_copy(self, trainer: L.Trainer) -> Path | None:
        merged = self.metrics_file(trainer)
        if merged is None:
            return None
        copy = self.scratch / f"metrics-{trainer.global_step:012d}.csv"
        shutil.copyfile(merged, copy)
        return copy

    def save(self, trainer: L.Trainer, *, must: bool = False, emergency: bool = False) -> bool:
        """Collective: every rank snapshots its share and hands it to its writer. A save
        that comes while the previous one is in flight waits for it, or with whenBusy:
        skip (and not `must`) is skipped by every rank. Returns whether it saved."""
        flags = torch.tensor([float(self.writer.busy), float(self.writer.failed_step)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.run.control)
        busy, failed = bool(flags[0]), int(flags[1])
        if failed >= 0:  # some rank's save of that step failed: nobody waits for its part
            self.writer.abandon(failed)
        # The stall is this save's own: waiting for the previous one, the snapshot. (The
        # agreement before it only waits for the slowest rank, as the next step would.)
        started = time.perf_counter()
        if busy and self.when_busy == "skip" and not must:
            self.skipped += 1
            if self.world.rank == 0:
                log.warning(
                    "checkpoint at step %d skipped: the previous one is still being written",
                    trainer.global_step,
                )
            return False
        self.writer.wait()
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        share = self.snapshotter.take(checkpoint, trainer.global_step, trainer.current_epoch)
        del checkpoint  # its tensors are live: only the copies leave this thread
        request = SaveRequest(
            share,
            stall=time.perf_counter() - started,
            emergency=emergency,
            skipped=self.skipped,
            metrics=self._metrics_copy(trainer),
        )
        self.writer.submit(request)
        self.skipped = 0
        self.last_saved_step, self.last_save_time = trainer.global_step, time.monotonic()
        return True

    def _agree(self, trainer: L.Trainer, batch_idx: int) -> tuple[bool, bool]:
        """(stop, checkpoint due), the same on every rank."""
        step: int = trainer.global_step
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        if batch_idx % AGREE_EVERY:
            return False, by_steps
        by_time = (
            self.every_seconds is not None
            and time.monotonic() - self.last_save_time >= self.every_seconds
        )
        flags = torch.tensor([float(PREEMPTED.is_set()), float(by_time)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.run.control)
        return bool(flags[0]), by_steps or bool(flags[1])

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.writer.superseded is not None:
            raise self.writer.superseded
        if not self.prepared and trainer.global_step > self.first_step:
            # The optimizer's state exists from its first step on: the buffers of every
            # later save can be made now, off the training thread.
            self.snapshotter.prepare(trainer._checkpoint_connector.dump_checkpoint(False))
            self.prepared = True
        stop, due = self._agree(trainer, batch_idx)
        if (due or stop) and trainer.global_step != self.last_saved_step:
            self.save(trainer, must=stop, emergency=stop)
        if stop:
            started = time.monotonic()
            self.writer.wait()
            if self.world.rank == 0:
                last = self.writer.last
                log.warning(
                    "SIGTERM: emergency checkpoint %s committed %.2fs after the stop",
                    last.key if last else "none",
                    time.monotonic() - started,
                )
            raise Preempted

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """This rank's RNG states, when the checkpoint has them (a rank of a larger world
        than the one that saved it keeps its seeded ones)."""
        states = checkpoint.get(RNG_KEY, {}).get(self.world.rank)
        if states is not None:
            restore_rng(states)

    def finish(self, trainer: L.Trainer) -> None:
        """After fit: a final checkpoint (unless the last step has one), then wait for it
        to commit. Collective."""
        if trainer.global_step != self.last_saved_step:
            self.save(trainer, must=True)
        self.writer.close()
        if self.writer.superseded is not None:
            raise self.writer.superseded
        last = self.writer.last
        if self.writer.error is not None and (last is None or last.step != trainer.global_step):
            raise RuntimeError(f"the final checkpoint was not committed: {self.writer.error}")


class OutputsCallback(L.Callback):
    """Commits the ranks' per-sample outputs at the end of every epoch (collective)."""

    def __init__(self, run: RunAttempt, outputs: RankOutputs) -> None:
        self.run, self.outputs = run, outputs

    def _commit(self, trainer: L.Trainer) -> None:
        if trainer.sanity_checking:
            return
        commit_epoch(
            self.run.store,
            self.outputs,
            trainer.current_epoch,
            rank=self.run.world.rank,
            world_size=self.run.world.world_size,
            attempt=self.run.attempt,
            gather=self.run.gather,
            barrier=self.run.barrier,
            fence=self.run.fence,
        )

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._commit(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._commit(trainer)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._commit(trainer)


class ProgressCallback(L.Callback):
    """Rank 0 logs a progress line (contract.Progress) every log_every_n_steps steps:
    readable in `kubectl logs`, parsed by clients from any backend's log stream."""

    def __init__(self, world: World, resumed_step: int) -> None:
        self.world, self.first_step = world, resumed_step
        self.started = time.monotonic()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        every = max(1, trainer.log_every_n_steps)
        if self.world.rank != 0 or step % every:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        rate = (step - self.first_step) / max(time.monotonic() - self.started, 1e-9)
        progress = Progress(
            epoch=trainer.current_epoch,
            step=step,
            total=trainer.max_steps if trainer.max_steps > 0 else None,
            loss=None if loss is None else round(float(loss), 6),
            rate=round(rate, 2),
        )
        log.info("%s", progress.line())
