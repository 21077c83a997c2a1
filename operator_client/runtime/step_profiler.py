"""Times the training loop for the goodput account: a Lightning profiler, which Lightning
already calls around every batch, data fetch and hook, so each call costs a clock read and a
dict lookup; the sums of each window become one `steps` event (runstore/events.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from lightning.pytorch.profilers import Profiler

from ..runstore import events
from .event_log import EventLog

# What an action Lightning profiles counts as (None: not measured).
TRAIN, DATA, STALL, OUTPUTS = "train", "data", "stall", "outputs"
EVAL_START, EVAL_END = "eval_start", "eval_end"


def _kind(action: str) -> str | None:
    if action == "run_training_batch":
        return TRAIN
    if action.endswith("].train_dataloader_next"):
        return DATA
    if action.startswith("[Callback]CheckpointCallback."):
        return STALL
    if action.startswith("[Callback]OutputsCallback."):
        return OUTPUTS
    if action.startswith("[LightningModule]") and action.endswith(".on_validation_start"):
        return EVAL_START
    if action.startswith("[LightningModule]") and action.endswith(".on_validation_end"):
        return EVAL_END
    return None


_UNTIMED = contextlib.nullcontext()  # reusable, re-entrant


class StepProfiler(Profiler):  # type: ignore[misc]
    """Sums the training loop's time per window and records a `steps` event for each
    (every events.WINDOW_SECONDS, and at close_window()). `step()` reads the trainer's
    global step (set once the trainer exists)."""

    def __init__(self, log: EventLog, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.log, self.clock = log, clock
        self.step: Callable[[], int] = lambda: 0
        self.kinds: dict[str, str] = {}  # action -> its kind, "" for one not timed
        self.started: dict[str, float] = {}
        self.first = True
        self._open()

    def _open(self) -> None:
        self.window_wall, self.window_start = time.time(), self.clock()
        self.from_step: int | None = None
        self.count = 0
        self.sums = {TRAIN: 0.0, DATA: 0.0, STALL: 0.0, OUTPUTS: 0.0, "eval": 0.0}

    def profile(self, action_name: str) -> contextlib.AbstractContextManager[object]:
        """Lightning wraps most hooks in this: an action not timed skips the generator
        Lightning's default profiler runs, which pays for the lookup (bench/goodput_overhead.py)."""
        if self.kinds.get(action_name) == "":
            return _UNTIMED
        return super().profile(action_name)  # type: ignore[no-any-return]

    def start(self, action_name: str) -> None:
        kind = self.kinds.get(action_name)
        if not kind:  # most actions: known ("") and not timed; the first time, looked up
            if kind is not None:
                return
            kind = self.kinds[action_name] = _kind(action_name) or ""
            if not kind:
                return
        now = self.clock()
        self.started[kind] = now
        if self.first and kind in (DATA, TRAIN):
            # The first window begins with the first batch's fetch, not when fit began.
            self.first = False
            self.window_wall, self.window_start = time.time(), now
            self.log.record("first_step", step=self.step())
        if kind == TRAIN and self.from_step is None:
            self.from_step = self.step()

    def stop(self, action_name: str) -> None:
        kind = self.kinds.get(action_name)
        if not kind or kind is EVAL_START:
            return
        now = self.clock()
        if kind == EVAL_END:
            began = self.started.pop(EVAL_START, None)
            if began is not None:
                self.sums["eval"] += now - began
            return
        began = self.started.pop(kind, None)
        if began is None:
            return
        self.sums[kind] += now - began
        if kind == TRAIN:
            self.count += 1
        elif EVAL_START in self.started:
            # Our hooks inside the validation's span (the outputs' commit at its epoch end;
            # a save that waited for it, runtime/lightning_seams.validation_follows): counted
            # once, as what they are.
            self.started[EVAL_START] += now - began
        elif kind == STALL and now - self.window_start >= events.WINDOW_SECONDS:
            self.close_window()  # after the batch's last hook of ours: a whole batch

    def close_window(self) -> None:
        """Record the window so far (if it trained) and open the next."""
        if self.count:
            self.log.record(
                "steps",
                start=round(self.window_wall, 6),
                **{"from": self.from_step, "to": self.step(), "count": self.count},
                **{f"{k}_s": round(v, 6) for k, v in self.sums.items()},
            )
        self._open()

    def summary(self) -> str:
        return ""  # nothing to print: the events are the summary
