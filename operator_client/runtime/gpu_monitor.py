"""GPU resource monitor: samples this node's GPUs through NVML on a background thread.

One CSV per node and attempt (runstore/monitor.py's layout), uploaded periodically. On a machine
without the NVIDIA driver it logs one line and does nothing else. Sampling is a handful
of NVML queries per GPU every few seconds, off the training thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..runstore.monitor import node_key, to_csv
from ..storage import ObjectStore

log = logging.getLogger("kctl_train.monitor")

Sampler = Callable[[], list[dict[str, float]]]


def nvml_sampler() -> Sampler | None:
    """A function returning one sample per local GPU, or None without a usable driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as exc:  # NVMLError, missing library: the same answer for the user
        log.info("GPU monitor off: no NVIDIA driver here (%s)", exc)
        return None
    if not handles:
        log.info("GPU monitor off: the driver reports no GPUs")
        return None

    def sample() -> list[dict[str, float]]:
        out = []
        for i, h in enumerate(handles):
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append(
                {
                    "gpu": i,
                    "utilization_pct": float(util.gpu),
                    "memory_used_mib": mem.used / 2**20,
                    "memory_total_mib": mem.total / 2**20,
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "temperature_c": float(
                        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                    ),
                }
            )
        return out

    return sample


class GpuMonitor:
    """Samples every `interval` seconds; uploads the node's CSV of this attempt every
    `upload_every` (a small file: rewriting it whole costs little)."""

    def __init__(
        self,
        sampler: Sampler,
        store: ObjectStore,
        node_rank: int,
        interval: float,
        upload_every: float = 15.0,  # a killed pod loses at most this much of its samples
        attempt: int = 1,
    ) -> None:
        self.sampler, self.store, self.key = sampler, store, node_key(node_rank, attempt)
        self.interval, self.upload_every = interval, upload_every
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)

    def start(self) -> GpuMonitor:
        self._thread.start()
        return self

    def _run(self) -> None:
        last_upload = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.time()
            try:
                self.rows.extend({"time": round(now, 3), **s} for s in self.sampler())
            except Exception as exc:
                log.warning("GPU sample failed: %s", exc)
            if time.monotonic() - last_upload >= self.upload_every:
                self.upload()
                last_upload = time.monotonic()

    def upload(self) -> None:
        try:
            self.store.put_bytes(self.key, to_csv(self.rows).encode())
        except Exception as exc:
            log.warning("GPU monitor upload failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.upload()
