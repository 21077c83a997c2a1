from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from operator_client.controlplane.pod_plan import PodPlan, plan_of

from .fake_apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def first_pod(
    manifest: Mapping[str, Any], replica_type: str, runtimes: Mapping[str, Any] | None = None
) -> PodPlan:
    """The first pod of a replica type in the job's pod plan."""
    return next(p for p in plan_of(manifest, runtimes).pods if p.type == replica_type)


def job_yaml(name: str, spec_body: str) -> str:
    """A TrainingJob document: the fixed header, then `spec_body` (indented lines under spec)."""
    return (
        "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\n"
        f"metadata: {{name: {name}}}\nspec:\n  image: local\n{spec_body}"
    )


@pytest.fixture
def write_job(tmp_path: Path) -> Callable[..., Path]:
    """Write job YAML text to a file and return its path."""

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """The Kubernetes API fixture (fake_apiserver.py) as the kubeconfig's cluster."""
    server = FakeApiServer()
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 API (moto's server) on loopback, with fake credentials in the env."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(moto_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A fresh bucket on the moto server; returns its name."""
    import uuid

    import boto3

    name = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=name)
    return name
