"""A small MLP fitted to sin(x), recording each validation sample's prediction."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from operator_client.runtime.outputs import record

# Changed by tests/test_build.py to show that one changed file changes the image.
HIDDEN = 16


class SineData(L.LightningDataModule):
    def __init__(self, samples: int = 1024, val_samples: int = 64, batch_size: int = 32) -> None:
        super().__init__()
        self.samples, self.val_samples, self.batch_size = samples, val_samples, batch_size

    def setup(self, stage: str) -> None:
        total = self.samples + self.val_samples
        x = torch.linspace(-math.pi, math.pi, total).unsqueeze(1)
        perm = torch.randperm(total, generator=torch.Generator().manual_seed(3))
        x, ids = x[perm], perm
        y = torch.sin(x)
        n = self.samples
        self.train_set = TensorDataset(x[:n], y[:n], ids[:n])
        self.val_set = TensorDataset(x[n:], y[n:], ids[n:])

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class SineModel(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(1, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, ids = batch
        prediction = self.net(x)
        self.log("val_loss", torch.nn.functional.mse_loss(prediction, y), sync_dist=True)
        record(
            self,
            "val",
            [
                {"sample": int(i), "prediction": round(float(p), 6)}
                for i, p in zip(ids, prediction.squeeze(1), strict=True)
            ],
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
