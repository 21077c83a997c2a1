"""A fault with a known history, as a Lightning callback a job lists in
`spec.train.callbacks`: the tests and bench/faults.py crash a run at a chosen step and check
what the goodput account makes of it (the steps redone since the checkpoint it resumed from).
"""

from __future__ import annotations

from typing import Any

import lightning as L


class CrashAtStep(L.Callback):
    """Fails every rank with an error once the global step reaches `step`, in a run that
    started fresh (an attempt that resumed from a checkpoint trains on): the worker exits
    1 and the job restarts as after any crash."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.fresh = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fresh = trainer.global_step == 0

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.fresh and trainer.global_step >= self.step:
            raise RuntimeError(f"CrashAtStep: a crash at step {trainer.global_step}, as asked")
