"""A ~100M-parameter model for the checkpoint benchmarks (checkpoint_stall.py on CPU,
gpu.py (d) on a GPU): `layers` Linear(width, width) blocks (6 x 4096: 100.7M parameters,
1.2 GB of state with Adam in fp32), random inputs, and a record of when each training step
started, written per rank to `timings` at the end (JSON: the perf_counter of each step's
start and the wall time of the first one)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class HeavyData(L.LightningDataModule):
    def __init__(self, width: int = 4096, samples: int = 512, batch_size: int = 4) -> None:
        super().__init__()
        self.width, self.samples, self.batch_size = width, samples, batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(3)
        self.train_set = TensorDataset(torch.randn(self.samples, self.width, generator=g))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)


class HeavyModel(L.LightningModule):
    def __init__(self, width: int = 4096, layers: int = 6, timings: str = "") -> None:
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
        self.timings = timings
        self._starts: list[float] = []
        self._first_wall: float | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.net(x).float().pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-6)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._first_wall is None:
            self._first_wall = time.time()
        self._starts.append(time.perf_counter())

    def on_train_end(self) -> None:
        if not self.timings:
            return
        self._starts.append(time.perf_counter())
        out = Path(self.timings) / f"rank-{self.trainer.global_rank}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "starts": self._starts,
                    "first_wall": self._first_wall,
                    "first_step": self.trainer.global_step - len(self._starts) + 1,
                }
            )
        )
