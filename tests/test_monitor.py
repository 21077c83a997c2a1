"""The GPU monitor's sampling loop, upload and summary, with a scripted sampler (no GPU here)."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from operator_client.runstore import monitor
from operator_client.runtime import gpu_monitor
from operator_client.storage import open_store


def test_samples_upload_and_summary(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    values = iter(range(1000))

    def sampler() -> list[dict[str, float]]:
        v = float(next(values))
        return [
            {
                "gpu": g,
                "utilization_pct": v + g,
                "memory_used_mib": 100.0,
                "memory_total_mib": 80000.0,
                "power_w": 300.0 + v,
                "temperature_c": 60.0,
            }
            for g in range(2)
        ]

    mon = gpu_monitor.GpuMonitor(sampler, store, node_rank=3, interval=0.01).start()
    time.sleep(0.2)
    mon.stop()
    rows = list(csv.DictReader(io.StringIO(store.get_bytes("monitor/node-00003.csv").decode())))
    assert len(rows) >= 4 and {r["gpu"] for r in rows} == {"0", "1"}
    assert monitor.write_summary(store) == 2
    summary = list(csv.DictReader(io.StringIO(store.get_bytes(monitor.SUMMARY).decode())))
    gpu1 = next(s for s in summary if s["gpu"] == "1")
    n = len(rows) // 2
    assert gpu1["node"] == "3" and int(gpu1["samples"]) == n
    assert float(gpu1["utilization_pct_max"]) == n - 1 + 1
    assert float(gpu1["utilization_pct_mean"]) == round((n - 1) / 2 + 1, 3)


def test_without_a_driver_the_monitor_is_off_with_one_line(caplog) -> None:  # type: ignore[no-untyped-def]
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pass
    else:  # pragma: no cover - a machine with a driver
        import pytest

        pytest.skip("an NVIDIA driver is present on this machine")
    with caplog.at_level("INFO", logger="kctl_train.monitor"):
        assert gpu_monitor.nvml_sampler() is None
    assert len(caplog.records) == 1
    assert "GPU monitor off" in caplog.records[0].getMessage()
