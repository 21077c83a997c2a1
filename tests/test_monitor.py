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
    key = "monitor/node-00003-attempt-0001.csv"
    rows = list(csv.DictReader(io.StringIO(store.get_bytes(key).decode())))
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


def test_every_attempts_samples_are_kept_summarized_and_plotted_on_one_axis(
    tmp_path: Path,
) -> None:
    """A node killed and resumed: its first attempt's file stays beside the second's; the
    summary counts both, the report puts both on one time axis with the restart marked."""
    from operator_client.collect.report import _gpu_series

    store = open_store((tmp_path / "store").as_uri())
    for attempt, start in ((1, 100.0), (2, 160.0)):
        rows = [
            {"time": start + t, "gpu": 0, "utilization_pct": 50.0 + attempt,
             "memory_used_mib": 1.0, "memory_total_mib": 2.0, "power_w": 3.0,
             "temperature_c": 4.0}
            for t in range(0, 20, 5)
        ]  # fmt: skip
        store.put_bytes(monitor.node_key(0, attempt), monitor.to_csv(rows).encode())
    store.put_bytes("monitor/node-00000.csv", monitor.to_csv([]).encode())  # an older layout
    assert monitor.write_summary(store) == 1
    summary = list(csv.DictReader(io.StringIO(store.get_bytes(monitor.SUMMARY).decode())))
    assert summary[0]["samples"] == "8" and summary[0]["utilization_pct_max"] == "52.0"
    got = tmp_path / "got"
    (got / "monitor").mkdir(parents=True)
    for o in store.list("monitor/node-"):
        (got / o.key).write_bytes(store.get_bytes(o.key))
    series, restarts = _gpu_series(got, [])
    times, utils = series["node 0 gpu 0"]
    assert times == [0.0, 5.0, 10.0, 15.0, 60.0, 65.0, 70.0, 75.0]
    assert utils == [51.0] * 4 + [52.0] * 4 and restarts == [60.0]


def test_a_monitor_row_that_is_not_numbers_is_passed_over(tmp_path: Path) -> None:
    """The pods write these files: a hostile row costs the report that row, no traceback."""
    from operator_client.collect.report import _gpu_series

    (tmp_path / "monitor").mkdir()
    (tmp_path / monitor.node_key(0, 1)).write_text(
        "time,gpu,utilization_pct\nx,0,5\n1.0,0,nan\n2.0,0,40\n"
    )
    assert _gpu_series(tmp_path, []) == ({"node 0 gpu 0": ([0.0], [40.0])}, [])
