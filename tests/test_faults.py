"""Cases of the fault suite (bench/faults.py) run here for real, each in its own bench run
so that the suite's workers share them out: a Master replica killed with its whole process
group mid-run (its workers must not survive it) and collect through a proxy that resets 10%
of connections; in pod sandboxes, a worker cut off the network for 10 s mid-epoch and a
`delete` with a 1 s grace period followed by a re-apply. The script exits 1 unless every try
held (no orphan processes, nothing lost beyond one checkpoint interval, every row once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from operator_client.backends.local.sandbox import support

from .conftest import ROOT

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")
pytest.importorskip("moto.server", reason="moto[server] is not installed")

WHY_NO_SANDBOX = support.why_not()
needs_sandboxes = pytest.mark.skipif(
    WHY_NO_SANDBOX is not None, reason=f"pod sandboxes are not possible here: {WHY_NO_SANDBOX}"
)


@pytest.mark.parametrize(
    "cases",
    [
        "collect-reset-10pct,kill-master-replica",
        pytest.param("partition-worker-10s", marks=needs_sandboxes),
        pytest.param("delete-grace-1s", marks=needs_sandboxes),
    ],
)
def test_fault_cases_hold(cases: str) -> None:
    # The machine decides whether sandboxes run, not a KCTL_TRAIN_LOCAL_PODS of the caller.
    env = {k: v for k, v in os.environ.items() if k != support.MODE_ENV}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/faults.py"), "--cases", cases],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    count = len(cases.split(","))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert f"0 of {count} tries did not hold" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(tuple(cases.split(",")))]
    assert len(rows) == count and all(" yes " in row for row in rows), out.stdout
    assert "skipped" not in out.stdout, out.stdout
