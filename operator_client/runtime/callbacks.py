"""The runtime's checkpoint callback: saves on schedule and the stop on SIGTERM they end
with, the rules that decide an emergency save, and the RunAttempt every callback shares
(the other callbacks: run_callbacks.py)."""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from ..runstore import checkpoint_log, checkpoints, runinfo
from ..runstore.metrics import merge as merge_metrics
from ..spec.model import TrainingJob
from ..spec.save_estimate import MARGIN_SECONDS
from ..storage import ObjectStore
from .agreement import Cadence
from .async_checkpoint import CheckpointWriter, SaveRequest, WriterConfig
from .checkpoint_format import RNG_KEY, restore_rng
from .context import RuntimeConfigError, World
from .event_log import EventLog
from .lightning_seams import checkpoint_dict, validation_follows
from .memory import pod_memory, staging_problem
from .snapshot import Snapshotter

log = logging.getLogger("kctl_train.runtime")


MAX_SCORES = 64  # metrics a manifest records, at most


def scores(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite scalar metrics Lightning holds (callback_metrics), for a checkpoint's
    manifest: what its best are chosen by."""
    found: dict[str, float] = {}
    for name, value in metrics.items():
        if len(found) >= MAX_SCORES:
            break
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError):  # not a scalar
            continue
        if math.isfinite(number):
            found[str(name)] = number
    return found


class Preemption:
    """The SIGTERM: set by the worker's handler (only a flag and the time: a handler must
    not block), read at the next agreement point."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.at: float | None = None  # monotonic time of the first SIGTERM
        self.latest: float | None = None  # and of the newest

    def signal(self, *_: Any) -> None:
        self.latest = time.monotonic()
        if self.at is None:
            self.at = self.latest
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


PREEMPTED = Preemption()


def emergency_save_fits(
    budget: checkpoint_log.SaveBudget | None,
    grace: float,
    since_signal: float,
    in_flight: bool,
    before: float = 0.0,
) -> bool:
    """Whether an emergency save can commit before the kubelet's SIGKILL: what one needs on
    this job (a save in flight, if there is one, then this one, and the exit), after
    `before` seconds of other work, within what is left of the grace period. Unknown
    before the first measured save: try."""
    left = grace - since_signal - before
    return left >= 0 and (budget is None or budget.needed(in_flight) <= left)


def commit_wait_over(
    now: float, began: float, latest_signal: float | None, needed: float | None
) -> bool:
    """Whether rank 0 stops waiting for a save's commit (its peers' parts), waiting since
    `began`: once a SIGTERM came during the wait (this pod's agent tearing the group down
    because a peer left, or the pod itself going) and what a save needs on this job
    (`needed`) has passed since the wait began. A peer that left after its part is in the
    store already; one killed before it never sends it; one still alive has had its time.
    Unknown (nothing measured yet): wait on, the agent's own timeout ends it."""
    signalled = latest_signal is not None and latest_signal > began
    return signalled and needed is not None and now - began >= needed


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
        events: EventLog | None = None,
        save_waits: tuple[Callable[[], None], Callable[[], None]] | None = None,
    ) -> None:
        """`save_waits`: a rehearsal's waits before each save's write and its upload
        (rehearsal.py)."""
        self.job, self.run, self.scratch = job, run, scratch
        self.events = events  # rank 0 records what a SIGTERM did there (status says it)
        self.wait_began = 0.0  # when the training thread began waiting for a save (monotonic)
        self.gave_up = False  # rank 0 abandoned a commit: its group is being torn down
        self.world, self.store = run.world, run.store
        policy = job.spec.checkpoint
        self.every_steps, self.every_seconds = policy.every.steps, policy.every.seconds
        self.when_busy = policy.when_busy
        # SIGTERM to SIGKILL as this job's pods see it: the rendered grace period, cut to
        # the spot notice on spot nodes.
        self.grace = float(job.spec.save_window_seconds)
        self.last_saved_step = resumed_step
        self.last_save_time = time.monotonic()
        self.first_step = resumed_step
        self.cadence = Cadence()
        # The metrics log of earlier attempts (rank 0), continued by this one.
        self.history = history
        self.skipped = 0
        self.prepared = False
        # A save (or SIGTERM stop) that waits for the validation after its batch, and how
        # long this run's last validation took (kept in the checkpoint, for the next attempt).
        self.after_validation: tuple[bool, bool] | None = None
        self.validation_s: float | None = None
        self.validation_began = 0.0
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
                best=checkpoints.Best.of(policy),
                group=group,
                fence=run.fence,
                verified=verified or checkpoints.Verified(run.store, scratch),
                **(
                    {"before_write": save_waits[0], "before_upload": save_waits[1]}
                    if save_waits
                    else {}
                ),
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
        self.wait_began = time.monotonic()
        self.writer.wait(self._give_up)
        checkpoint = checkpoint_dict(trainer)
        share = self.snapshotter.take(checkpoint, trainer.global_step, trainer.current_epoch)
        del checkpoint  # its tensors are live: only the copies leave this thread
        request = SaveRequest(
            share,
            stall=time.perf_counter() - started,
            emergency=emergency,
            skipped=self.skipped,
            metrics=self._metrics_copy(trainer),
            scores=scores(trainer.callback_metrics),
        )
        self.writer.submit(request)
        self.skipped = 0
        self.last_saved_step, self.last_save_time = trainer.global_step, time.monotonic()
        return True

    def _agree(self, trainer: L.Trainer) -> tuple[bool, bool]:
        """(stop, checkpoint due), the same on every rank (agreement.py: how often)."""
        step: int = trainer.global_step
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        if not self.cadence.due():
            return False, by_steps
        now = time.monotonic()
        by_time = self.every_seconds is not None and now - self.last_save_time >= self.every_seconds
        proposal = -float(self.cadence.proposal(now))
        flags = torch.tensor([float(PREEMPTED.is_set()), float(by_time), proposal])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.run.control)
        self.cadence.agreed(int(-flags[2].item()), now)
        return bool(flags[0]), by_steps or bool(flags[1])

    def _emergency_fits(self, before: float | None = 0.0, *, explain: bool = True) -> bool:
        """Rank 0's answer (it alone has the save log), the same on every rank: whether the
        save fits after `before` seconds (None: unknown, it does not); `explain` logs why
        a save that does not fit is not started."""
        fits = 1.0
        if self.world.rank == 0:
            since = time.monotonic() - PREEMPTED.at if PREEMPTED.at is not None else 0.0
            budget, busy = self.writer.budget, self.writer.busy
            fits = float(
                before is not None and emergency_save_fits(budget, self.grace, since, busy, before)
            )
            if not fits and explain and budget is not None:
                last = self.writer.last
                log.warning(
                    "SIGTERM: an emergency save needs about %.1fs on this job (%sthis one "
                    "%.1fs: the 95th percentile of %d saves, and %.0fs to exit), %.1fs are "
                    "left of the %.0fs grace period: not started, so nothing half-written "
                    "is left; the newest committed checkpoint stands (%s)",
                    budget.needed(busy),
                    f"a save in flight {budget.in_flight_s:.1f}s, then " if busy else "",
                    budget.save_s, budget.saves, MARGIN_SECONDS,
                    self.grace - since, self.grace,
                    last.key if last else "none from this attempt",
                )  # fmt: skip
        flag = torch.tensor([fits])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.run.control)
        return bool(flag.item())

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
            # later save can be made now, off the training thread, if the pod has room.
            checkpoint = checkpoint_dict(trainer)
            share = self.snapshotter.plan(checkpoint)
            problem = staging_problem(share, self.world.local_world_size, pod_memory())
            if problem:
                raise RuntimeConfigError(f"checkpoints refused: {problem}")
            self.snapshotter.prepare(checkpoint)
            self.prepared = True
        stop, due = self._agree(trainer)
        if not ((stop or due) and self._after_validation(trainer, stop, due)):
            self._save_or_stop(trainer, stop, due)

    def _after_validation(self, trainer: L.Trainer, stop: bool, due: bool) -> bool:
        """Whether the save (or stop) of this batch waits for the validation after it
        (collective when `stop`): a save always does; a stop when the validation's last
        time and the save fit what is left of the grace period, else it saves first."""
        if not validation_follows(trainer):
            return False
        if not stop or self._emergency_fits(self.validation_s, explain=False):
            self.after_validation = (stop, due)
            if stop and self.world.rank == 0:
                log.warning(
                    "SIGTERM: training stopped at step %d; epoch %d's validation runs "
                    "first (%.3fs last time), then the emergency save",
                    trainer.global_step, trainer.current_epoch, self.validation_s or 0.0,
                )  # fmt: skip
            return True
        if self.world.rank == 0:
            log.warning(
                "SIGTERM at step %d, before epoch %d's validation: saving first (its "
                "validation %s); a resume from this step does not validate it again",
                trainer.global_step, trainer.current_epoch,
                "time is not known yet" if self.validation_s is None
                else f"of {self.validation_s:.1f}s and the save do not both fit",
            )  # fmt: skip
        return False

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.validation_began = time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.validation_s = time.monotonic() - self.validation_began
        if self.after_validation is not None:
            (stop, due), self.after_validation = self.after_validation, None
            self._save_or_stop(trainer, stop, due)

    def state_dict(self) -> dict[str, Any]:
        return {"validation_s": self.validation_s}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        seconds = state_dict.get("validation_s")  # read from the store: a number, or none
        self.validation_s = float(seconds) if isinstance(seconds, int | float) else None

    def _save_or_stop(self, trainer: L.Trainer, stop: bool, due: bool) -> None:
        """The save that is due, or on SIGTERM the emergency save, the commit and the stop."""
        fits = not stop or self._emergency_fits()
        stopped = time.monotonic()
        if stop and self.world.rank == 0:
            log.warning(
                "SIGTERM: training stopped at step %d, %.2fs after the signal",
                trainer.global_step, stopped - (PREEMPTED.at or stopped),
            )  # fmt: skip
        saving = (due or stop) and fits and trainer.global_step != self.last_saved_step
        if stop and self.world.rank == 0 and self.events is not None:
            self._record_sigterm(trainer.global_step, stopped, saving, fits)
        if saving:
            self.save(trainer, must=stop, emergency=stop)
            if stop and self.world.rank == 0:
                log.warning(
                    "SIGTERM: snapshot of step %d taken in %.3fs (after any save in flight); "
                    "writing it", trainer.global_step, time.monotonic() - stopped,
                )  # fmt: skip
        if stop:
            started = time.monotonic()
            # A save in flight commits, or is killed whole by SIGKILL, or is given up.
            self.wait_began = stopped
            self.writer.wait(self._give_up)
            if self.world.rank == 0 and fits:
                last = self.writer.last
                if self.events is not None and last is not None:
                    self.events.record("emergency_commit", step=last.step, key=last.key)
                log.warning(
                    "SIGTERM: emergency checkpoint %s committed %.2fs after the stop "
                    "(%.2fs after the signal)",
                    last.key if last else "none",
                    time.monotonic() - started,
                    time.monotonic() - (PREEMPTED.at or stopped),
                )
            raise Preempted

    def _give_up(self) -> bool:
        """Rank 0 (the only rank that waits for others' parts), waiting for a save's
        commit: whether to abandon it (commit_wait_over: a save in flight and one more,
        as measured here), saying so once; after that every wait gives up at once, as
        the group is going."""
        if self.world.rank != 0 or self.gave_up:
            return self.gave_up
        budget = self.writer.budget
        needed = budget.needed(True) if budget is not None else None
        now = time.monotonic()
        self.gave_up = commit_wait_over(now, self.wait_began, PREEMPTED.latest, needed)
        if self.gave_up:
            log.warning(
                "SIGTERM while a save waited %.1fs for its parts (a save needs %.1fs here): "
                "a peer that has not sent its part by now is gone, so the save is "
                "abandoned; the newest committed checkpoint stands",
                now - self.wait_began, needed or 0.0,
            )  # fmt: skip
        return self.gave_up

    def _record_sigterm(self, step: int, stopped: float, saving: bool, fits: bool) -> None:
        """The `sigterm` event (runstore/events.py), written at once: a SIGKILL may follow.
        Rank 0's, with what _emergency_fits just weighed: the budget, the grace left."""
        assert self.events is not None
        budget = self.writer.budget
        needed = budget.needed(self.writer.busy) if budget is not None else None
        left = self.grace - (stopped - (PREEMPTED.at or stopped))
        self.events.record(
            "sigterm",
            step=step,
            after_s=round(stopped - (PREEMPTED.at or stopped), 3),
            saving=saving,
            saved_before=not saving and fits,  # this step's checkpoint was taken already
            needed_s=None if needed is None else round(needed, 3),
            left_s=round(left, 3),
            grace_s=self.grace,
        )
        self.events.flush_soon()

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
