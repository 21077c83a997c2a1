"""Bounds on what local pods write (backends/local/eviction.py): the kubelet's eviction for
local storage, measured on the job's run directory, and the tmpfs sizes of a pod's own
layers. A job that writes past its ephemeral-storage limit is evicted, in the kubelet's
words, and its pods stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client.backends.local import eviction
from operator_client.backends.local.sandbox.podspec import ephemeral_limit
from operator_client.contract import RUN_ROOT_ANNOTATION

from . import written
from .conftest import first_pod

KCTL = str(Path(sys.executable).parent / "kctl-train")


@pytest.mark.parametrize(
    ("size", "text"), [(20 << 30, "20Gi"), (1536 << 20, "1536Mi"), (1000, "1000"), (0, "0")]
)
def test_quantities_print_as_the_api_server_prints_them(size: int, text: str) -> None:
    assert eviction.quantity(size) == text


def test_usage_counts_blocks_and_stops_early(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(os.urandom(64 << 10))
    (tmp_path / "link").symlink_to("/usr")
    used = eviction.usage(tmp_path, 1 << 30)
    assert 64 << 10 <= used < 1 << 20
    assert eviction.eviction(used, 1 << 30, tmp_path) is None
    message = eviction.eviction(used, 1 << 10, tmp_path)
    assert message and message.startswith(
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Ki."
    )


def runtime_and_job(
    store: Path, name: str, command: list[str], limit: str | None
) -> tuple[Any, Any]:
    container: dict[str, Any] = {"name": "node", "image": "x"}
    if limit:
        container["resources"] = {"limits": {"ephemeral-storage": limit}}
    root = (store / "default" / name).as_uri() + "/"
    job = written.trainjob(name, "plain", command, {RUN_ROOT_ANNOTATION: root})
    return written.runtime("plain", {"containers": [container]}), job


def test_the_limit_is_the_containers_or_the_local_default() -> None:
    runtime, job = runtime_and_job(Path("/s"), "j", ["true"], "3Gi")
    pod = first_pod(job, "node", {"plain": runtime})
    assert ephemeral_limit(pod, {}) == 3 << 30
    runtime, job = runtime_and_job(Path("/s"), "j", ["true"], None)
    pod = first_pod(job, "node", {"plain": runtime})
    assert ephemeral_limit(pod, {}) == 20 << 30
    assert ephemeral_limit(pod, {"KCTL_TRAIN_LOCAL_EPHEMERAL_STORAGE": "1Mi"}) == 1 << 20
    with pytest.raises(ValueError, match="is not a quantity"):
        ephemeral_limit(pod, {"KCTL_TRAIN_LOCAL_EPHEMERAL_STORAGE": "lots"})


WRITER = """
import os, sys, time
with open(os.path.join(sys.argv[1], "blob"), "wb") as fh:
    for _ in range(8):
        fh.write(os.urandom(1 << 20))
        fh.flush()
time.sleep(120)
"""


def test_a_pod_writing_past_its_limit_is_evicted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = store / "default" / "hog"
    runtime, job = runtime_and_job(store, "hog", ["python3", "-c", WRITER, str(run)], "2Mi")
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(runtime))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    env = {**os.environ, "KCTL_TRAIN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    out = subprocess.run(
        [KCTL, "apply", "job.yaml", "--local", "--runtime", "runtime.yaml", "--wait",
         "--no-collect", "--timeout", "90"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=150,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi." in (
        out.stdout + out.stderr
    )
    status = subprocess.run(
        [KCTL, "status", "hog", "--local", "-o", "json"], capture_output=True, text=True, env=env
    )
    conditions = json.loads(status.stdout)["status"]["conditions"]
    assert conditions[-1]["reason"] == "Evicted", conditions
