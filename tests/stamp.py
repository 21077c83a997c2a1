"""A model whose state says which step it belongs to (tests/test_checkpoint_saves.py).

Every optimizer step adds exactly 1 to every weight and to a tensor of the optimizer's
state, whatever the gradients: after step N both hold N everywhere. A checkpoint holding
any other value, or weights and optimizer state that disagree, holds state of two steps
(torn). The loss still depends on the weights and on the batch, so a resumed run
reproduces an uninterrupted one's losses only with the weights and the data position both
restored exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class StampOptimizer(torch.optim.Optimizer):
    def __init__(self, params: Any) -> None:
        super().__init__(params, {})

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "stamp" not in state:
                    state["stamp"] = torch.zeros_like(p)
                p.add_(1.0)
                state["stamp"].add_(1.0)
        return loss


class StampData(L.LightningDataModule):
    """`samples` rows of 16 features, shuffled each epoch (DistributedSampler's seed)."""

    def __init__(self, samples: int = 256, batch_size: int = 16) -> None:
        super().__init__()
        self.samples, self.batch_size = samples, batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(7)
        x = torch.randn(self.samples, 16, generator=g)
        self.train_set = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)


class StampModel(L.LightningModule):
    def __init__(self, size: int = 1 << 18) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(size))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        prediction = x @ (self.w[:16] * 1e-3).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(prediction, y) + 0.0 * self.w.sum()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return StampOptimizer(self.parameters())


class FuzzData(StampData):
    """StampData with a validation set whose samples carry their ids (the outputs)."""

    def __init__(self, samples: int = 256, batch_size: int = 16, val_samples: int = 32) -> None:
        super().__init__(samples, batch_size)
        self.val_samples = val_samples

    def setup(self, stage: str) -> None:
        super().setup(stage)
        x = torch.randn(self.val_samples, 16, generator=torch.Generator().manual_seed(8))
        self.val_set = TensorDataset(x, torch.arange(self.val_samples))

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class RngProbe(L.Callback):
    """Writes the torch RNG state a rank holds once a checkpoint is restored (the
    runtime's callback, earlier in the list, restores it) as a digest with the step, to
    $KCTL_FUZZ_DIR/rng-<rank>.jsonl. Taken here, not at on_train_start: Lightning draws
    from the RNG in between (it iterates the dataloader once to check it)."""

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        directory = os.environ.get("KCTL_FUZZ_DIR")
        if directory:
            digest = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()
            line = json.dumps({"step": checkpoint["global_step"], "rng": digest})
            with open(Path(directory) / f"rng-{trainer.global_rank}.jsonl", "a") as out:
                out.write(line + "\n")


class FuzzModel(StampModel):
    """StampModel for the crash fuzz (tests/crash_fuzz.py): each step takes `step_delay`
    seconds; each rank's RNG is its own (a rank-dependent draw before the fit), and
    RngProbe records what a restore left; validation records every sample."""

    def __init__(self, size: int = 1 << 16, step_delay: float = 0.04) -> None:
        super().__init__(size)
        self.step_delay = step_delay

    def setup(self, stage: str) -> None:
        torch.rand(self.global_rank + 1)

    def configure_callbacks(self) -> list[L.Callback]:
        return [RngProbe()]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.step_delay)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        from operator_client.runtime.outputs import record

        _, ids = batch
        record(self, "val", [{"sample": int(i)} for i in ids])
