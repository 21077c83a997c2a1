"""The real cluster of `make cluster` (cluster/up.sh) as the e2e suite sees it.

Its tests run kctl-train as the namespaced user (`.cluster/user.kubeconfig`, bound to the
shipped manifests/rbac Role) and look at what the controllers did with the admin's kubectl,
the one built from k8s.io/kubernetes with the cluster. No cluster: they skip, saying why and
how to start one; under CI=true they fail instead, as the CRD tests do.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..conftest import ROOT

STATE = Path(os.environ.get("CLUSTER_DIR", ROOT / ".cluster"))
NAMESPACE = "kctl-e2e"
KCTL = ROOT / ".venv" / "bin" / "kctl-train"
T = TypeVar("T")
# The label each operator puts on a job's pods (a TrainJob's come from its JobSet, named alike).
JOB_LABEL = {
    "pytorchjob": "training.kubeflow.org/job-name",
    "trainjob": "jobset.sigs.k8s.io/jobset-name",
}


@dataclass(frozen=True)
class Cluster:
    """The running cluster: its kubeconfigs and its kubectl."""

    admin: Path
    user: Path
    kubectl_bin: Path

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster's admin."""
        return subprocess.run(
            [str(self.kubectl_bin), "--kubeconfig", str(self.admin), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json` as the admin, parsed."""
        found: dict[str, Any] = json.loads(self.kubectl("get", "-o", "json", *args).stdout)
        return found

    @property
    def user_env(self) -> dict[str, str]:
        """The environment kctl-train runs in: the namespaced user's kubeconfig, no colour."""
        return {**os.environ, "KUBECONFIG": str(self.user), "NO_COLOR": "1"}

    def kctl(
        self, *args: str, timeout: float = 300, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kctl-train as the namespaced user (`env` added to its environment)."""
        return subprocess.run(
            [str(KCTL), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.user_env, **(env or {})},
            cwd=ROOT,
        )

    def pods(
        self, job: str, namespace: str = NAMESPACE, kind: str = "pytorchjob"
    ) -> list[dict[str, Any]]:
        """The pods the controllers made for a job, as the admin sees them."""
        selector = f"{JOB_LABEL[kind]}={job}"
        items: list[dict[str, Any]] = self.get("pods", "-n", namespace, "-l", selector)["items"]
        return items


def _unavailable() -> str | None:
    for path in (STATE / "kubeconfig", STATE / "user.kubeconfig", STATE / "bin" / "kubectl"):
        if not path.is_file():
            return f"{path} is missing"
    ready = subprocess.run(
        [
            str(STATE / "bin" / "kubectl"),
            "--kubeconfig",
            str(STATE / "kubeconfig"),
            "get",
            "--raw",
            "/readyz",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if ready.returncode != 0:
        return f"its API server does not answer: {ready.stderr.strip() or ready.stdout.strip()}"
    return None


def missing(message: str) -> None:
    """A piece of the cluster is missing: skip saying why, or fail under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def connect() -> Cluster:
    """The running cluster; skips (fails under CI=true) when there is none."""
    reason = _unavailable()
    if reason:
        missing(
            f"no cluster from `make cluster` ({reason}); start one with `make cluster` "
            "(root, Go 1.26 and its module proxy)"
        )
    return Cluster(STATE / "kubeconfig", STATE / "user.kubeconfig", STATE / "bin" / "kubectl")


def eventually(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll `probe` until it returns something other than None; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout:.0f} s")
        time.sleep(0.5)


@contextmanager
def node_to_oneself() -> Iterator[None]:
    """The real node has two CPUs and a job of two pods takes both: two jobs at once would
    each get one pod and wait for ever (no gang scheduling). Tests that put pods there hold
    this lock, whichever pytest worker runs them."""
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "node.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
