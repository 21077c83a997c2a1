"""The training thread's part of a save: a point-in-time copy of this rank's share of the
checkpoint, into host buffers that are reused from save to save (pinned for GPU tensors),
so the writer thread never touches a live tensor (a checkpoint never holds state from two
steps; docs/STORAGE.md). Nothing here serialises or writes: that is async_checkpoint.py's,
off the training thread.

The buffers are made once the state has its full shape (after the first optimizer step),
on a thread of their own: allocating and first touching gigabytes (pinning them, on a GPU
machine) is slow, and would otherwise stall the first save.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from .checkpoint_format import SKELETON, assign, flatten, rng_item, rng_states, skeleton_bytes
from .memory import gib, rss

log = logging.getLogger("kctl_train.runtime")


@dataclass
class Share:
    """What one rank writes of one checkpoint: copies, never live tensors."""

    step: int
    epoch: int
    items: dict[str, torch.Tensor | io.BytesIO]
    nbytes: int
    copy_seconds: float


class Snapshotter:
    """Copies this rank's share of a checkpoint. `writers`: how many ranks share the
    writing (1 when only rank 0 can reach what the others write)."""

    def __init__(self, rank: int, writers: int) -> None:
        self.rank, self.writers = rank, writers
        self._buffers: dict[str, torch.Tensor] = {}
        self._plan: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self._making: threading.Thread | None = None

    def plan(self, checkpoint: dict[str, Any]) -> int:
        """Plan this rank's share of `checkpoint`; its size in bytes (what its staging
        buffers will take)."""
        tensors = flatten(checkpoint)[1]
        self._replan(tensors)
        return sum(self._sizes[n] for n, _ in self._mine(tensors))

    def prepare(self, checkpoint: dict[str, Any]) -> None:
        """Make the buffers of the share plan() planned, in the background (take() waits
        for them)."""
        tensors = flatten(checkpoint)[1]
        self._replan(tensors)
        specs = [(n, t.shape, t.dtype, t.is_cuda) for n, t in self._mine(tensors)]
        self._making = threading.Thread(target=self._make, args=(specs,), daemon=True)
        self._making.start()

    def _make(self, specs: list[tuple[str, torch.Size, torch.dtype, bool]]) -> None:
        before, started = rss(), time.perf_counter()
        for name, shape, dtype, pinned in specs:
            buffer = torch.empty(shape, dtype=dtype, device="cpu", pin_memory=pinned)
            buffer.zero_()  # touched now, not in the first save
            self._buffers[name] = buffer
        share = sum(b.numel() * b.element_size() for b in self._buffers.values())
        # What the staging costs the process, beside the share itself (bench/checkpoint_stall.py).
        log.info(
            "rank %d: staging buffers for a %s share made in %.2fs: resident memory %+.2f GiB",
            self.rank, gib(share), time.perf_counter() - started, (rss() - before) / 2**30,
        )  # fmt: skip

    def _replan(self, tensors: dict[str, torch.Tensor]) -> None:
        sizes = {name: t.numel() * t.element_size() for name, t in tensors.items()}
        if sizes != self._sizes:  # the first save, or the state changed shape (new params)
            self._plan, self._sizes = assign(sizes, self.writers), sizes

    def _mine(self, tensors: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
        return [(n, t) for n, t in tensors.items() if self._plan[n] == self.rank]

    def take(self, checkpoint: dict[str, Any], step: int, epoch: int) -> Share:
        """Copy the share out of `checkpoint` (Lightning's dict of live tensors) now, at
        this step boundary; training may change every tensor once this returns."""
        started = time.perf_counter()
        if self._making is not None:
            self._making.join()
            self._making = None
        skeleton, tensors = flatten(checkpoint)
        self._replan(tensors)
        items: dict[str, torch.Tensor | io.BytesIO] = {}
        on_gpu = False
        for name, tensor in self._mine(tensors):
            items[name] = self._copy(name, tensor)
            on_gpu = on_gpu or tensor.is_cuda
        if on_gpu:  # the copies are whole before training goes on
            torch.cuda.current_stream().synchronize()
        if self.rank == 0:
            items[SKELETON] = skeleton_bytes(skeleton)
        items[rng_item(self.rank)] = rng_states()
        nbytes = sum(self._sizes[n] for n in items if n in self._sizes)
        return Share(step, epoch, items, nbytes, time.perf_counter() - started)

    def _copy(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        source = tensor.detach()
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
            buffer = torch.empty(
                source.shape, dtype=source.dtype, device="cpu", pin_memory=source.is_cuda
            )
            self._buffers[name] = buffer
        buffer.copy_(source, non_blocking=source.is_cuda)
        return buffer
