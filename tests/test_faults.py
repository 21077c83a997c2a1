"""The fast cases of the fault suite (bench/faults.py) run here for real: a Master replica
killed with its whole process group mid-run (its workers must not survive it), and collect
through a proxy that resets 10% of connections. The script exits 1 unless every try held
(no orphan processes, nothing lost beyond one checkpoint interval, every row once)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")
pytest.importorskip("moto.server", reason="moto[server] is not installed")


def test_fast_fault_cases_hold() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/faults.py"),
            "--cases",
            "collect-reset-10pct,kill-master-replica",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "0 of 2 tries did not hold" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("collect", "kill"))]
    assert len(rows) == 2 and all(" yes " in row for row in rows), out.stdout
