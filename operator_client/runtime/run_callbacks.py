"""The runtime's Lightning callbacks besides the checkpoints (callbacks.py): each epoch's
per-rank outputs committed, rank 0's progress lines, and the TrainJob status Kubeflow
Trainer asks for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import lightning as L

from ..contract import Progress
from ..runstore import events, goodput
from ..runstore.outputs import RankOutputs, commit_epoch
from .callbacks import CheckpointCallback, RunAttempt
from .context import World
from .event_log import EventLog
from .trainer_status import TrainerStatusReporter

log = logging.getLogger("kctl_train.runtime")


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
        self.last: Progress | None = None  # the newest line logged

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
        self.last = progress


class TrainerStatusCallback(L.Callback):
    """Rank 0, where Kubeflow Trainer asks for it (trainer_status.py): the newest progress,
    rank 0's goodput so far this attempt and the newest committed checkpoint's step, posted
    to the TrainJob's status as training goes, and once more when it ends."""

    def __init__(
        self,
        reporter: TrainerStatusReporter,
        progress: ProgressCallback,
        saver: CheckpointCallback,
        events: EventLog,
        close_window: Callable[[], None],
    ) -> None:
        self.reporter, self.progress, self.saver, self.events = reporter, progress, saver, events
        self.close_window = close_window  # the step profiler's: its steps into the events

    def metrics(self) -> dict[str, float | int | None]:
        with self.events.lock:
            mine = events.RankEvents(self.saver.run.attempt, 0, list(self.events.events))
        found = goodput.account([mine])
        last = self.saver.writer.last
        return {
            "goodput": round(found.goodput, 4) if found else None,
            "lastCheckpointStep": last.step if last else None,
        }

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.progress.last is not None:
            self.reporter.offer(self.progress.last, self.metrics)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        last = self.progress.last
        if last is not None:
            self.close_window()  # the last steps, so that the goodput counts them
            # Training is over (max_steps, or a callback stopped it early): all of it done.
            step = trainer.global_step
            final = replace(last, step=step, total=step, epoch=trainer.current_epoch)
            self.reporter.offer(final, self.metrics, now=True)
