"""The Lightning callbacks of the runtime, one job each: checkpoints (and the stop on
SIGTERM they end with), per-rank outputs, progress lines. They share one RunAttempt."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from ..contract import Progress, checkpoint_name
from ..runstore import checkpoints, runinfo
from ..runstore.metrics import KEY as METRICS_KEY
from ..runstore.metrics import merge as merge_metrics
from ..runstore.outputs import RankOutputs, commit_epoch
from ..spec.model import TrainingJob
from ..storage import ObjectStore
from .context import World
from .publisher import BackgroundPublisher

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
    """Saves every checkpoint.every (steps or wall time), publishes in the background
    (rank 0), and on SIGTERM commits an emergency checkpoint, then stops every rank."""

    def __init__(
        self,
        job: TrainingJob,
        run: RunAttempt,
        scratch: Path,
        resumed_step: int,
        history: Path | None = None,
        verified: checkpoints.Verified | None = None,
    ) -> None:
        self.job, self.run, self.scratch = job, run, scratch
        self.world, self.store = run.world, run.store
        every = job.spec.checkpoint.every
        self.every_steps, self.every_seconds = every.steps, every.seconds
        self.last_saved_step = resumed_step
        self.last_save_time = time.monotonic()
        self.first_step = resumed_step
        # The metrics log of earlier attempts (rank 0), continued by this one.
        self.history = history
        self.verified = verified or checkpoints.Verified(run.store, scratch)
        self.publisher = BackgroundPublisher(self._publish) if run.world.rank == 0 else None

    def _publish(self, files: dict[str, Path], step: int, epoch: int) -> checkpoints.Manifest:
        metrics = files.pop("metrics.csv", None)
        manifest = checkpoints.publish(
            self.store,
            files,
            step=step,
            epoch=epoch,
            attempt=self.run.attempt,
            world_size=self.world.world_size,
            keep=self.job.spec.checkpoint.keep,
            fence=self.run.fence,
            verified=self.verified,
        )
        if metrics is not None:
            self.store.put_file(METRICS_KEY, metrics)
            metrics.unlink()
        shutil.rmtree(next(iter(files.values())).parent, ignore_errors=True)
        return manifest

    def _stage(self, trainer: L.Trainer, save: Callable[[Path], None]) -> dict[str, Path]:
        step = trainer.global_step
        directory = self.scratch / "checkpoints" / checkpoint_name(step)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / checkpoints.MODEL_FILE
        save(path)
        files = {checkpoints.MODEL_FILE: path}
        metrics = self.metrics_file(trainer)
        if metrics is not None:
            copy = directory.parent / f"metrics-{step:012d}.csv"
            shutil.copyfile(metrics, copy)
            files["metrics.csv"] = copy
        return files

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

    def save(self, trainer: L.Trainer) -> None:
        """Collective: all ranks save (rank 0 writes), rank 0 publishes in the background."""
        files = self._stage(trainer, lambda p: trainer.save_checkpoint(p, weights_only=False))
        self.last_saved_step, self.last_save_time = trainer.global_step, time.monotonic()
        if self.publisher is not None:
            self.publisher.submit(files, trainer.global_step, trainer.current_epoch)

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
        if self.publisher is not None and self.publisher.superseded is not None:
            raise self.publisher.superseded
        stop, due = self._agree(trainer, batch_idx)
        if (due or stop) and trainer.global_step != self.last_saved_step:
            self.save(trainer)
        if stop:
            log.warning("SIGTERM: emergency checkpoint at step %d", trainer.global_step)
            if self.publisher is not None:
                self.publisher.drain()
                last = self.publisher.last
                log.warning("emergency checkpoint committed: %s", last.key if last else "none")
            raise Preempted

    def finish(self, trainer: L.Trainer) -> None:
        """After fit: a final checkpoint (unless the last step has one), then wait for all
        uploads. Collective."""
        if trainer.global_step != self.last_saved_step:
            self.save(trainer)
        if self.publisher is not None:
            self.publisher.close()
            if self.publisher.superseded is not None:
                raise self.publisher.superseded
            if self.publisher.error is not None and (
                self.publisher.last is None or self.publisher.last.step != trainer.global_step
            ):
                raise RuntimeError(
                    f"the final checkpoint was not committed: {self.publisher.error}"
                )


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
