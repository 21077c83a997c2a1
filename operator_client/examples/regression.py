"""A small LightningModule + DataModule on synthetic data that also records per-rank outputs.

Linear regression on a fixed random problem: cheap enough for CPU tests with several
processes, real enough to show a falling loss. Validation predictions are recorded per
sample with `record`, so the aggregate has one row per validation sample and epoch.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from ..runtime.outputs import record


class RegressionData(L.LightningDataModule):
    """y = X·w + noise, generated from a fixed seed (identical on every rank)."""

    def __init__(
        self,
        samples: int = 2048,
        val_samples: int = 240,
        features: int = 16,
        batch_size: int = 32,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        self.samples, self.val_samples, self.features = samples, val_samples, features
        self.batch_size, self.seed = batch_size, seed

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(self.seed)
        weights = torch.randn(self.features, 1, generator=g)
        total = self.samples + self.val_samples
        x = torch.randn(total, self.features, generator=g)
        y = x @ weights + 0.1 * torch.randn(total, 1, generator=g)
        ids = torch.arange(total)
        n = self.samples
        self.train_set = TensorDataset(x[:n], y[:n], ids[:n])
        self.val_set = TensorDataset(x[n:], y[n:], ids[n:])

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class RegressionModel(L.LightningModule):
    """A linear model; `step_delay` and `val_delay` (seconds) slow each training and
    validation step for fault-injection tests."""

    def __init__(
        self, features: int = 16, lr: float = 0.05, step_delay: float = 0.0, val_delay: float = 0.0
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(features, 1)
        self.lr, self.step_delay, self.val_delay = lr, step_delay, val_delay

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        if self.step_delay:
            time.sleep(self.step_delay)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, ids = batch
        if self.val_delay:
            time.sleep(self.val_delay)
        prediction = self.layer(x)
        self.log("val_loss", torch.nn.functional.mse_loss(prediction, y), sync_dist=True)
        record(
            self,
            "val",
            [
                {"sample": int(i), "target": round(float(t), 6), "prediction": round(float(p), 6)}
                for i, t, p in zip(ids, y.squeeze(1), prediction.squeeze(1), strict=True)
            ],
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)
