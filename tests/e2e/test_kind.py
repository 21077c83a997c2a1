"""The kind end-to-end test: a real cluster (kind), the real training-operator v1.9.4,
MinIO and the trainer image (tests/e2e/run-kind.sh). It needs Docker, kind and kubectl;
without them it is skipped with the reason, never counted as passed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ..conftest import ROOT


def _missing() -> str | None:
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "the Docker daemon is not running (kind needs it)"
    return None


def test_kind_cluster_end_to_end() -> None:
    reason = _missing()
    if reason:
        pytest.skip(f"kind e2e needs a Docker host: {reason}; see tests/e2e/run-kind.sh")
    result = subprocess.run(["bash", str(ROOT / "tests/e2e/run-kind.sh")], cwd=ROOT, timeout=3600)
    assert result.returncode == 0
