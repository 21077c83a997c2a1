"""The runtime's TrainJob status posts (runtime/trainer_status.py, KEP-2779): the body
against Trainer v2.3.0's CRD, posted over TLS with the rotating bearer token to a real
HTTPS server, nothing where the gate is off, and a controller that does not answer never
failing training. (Trainer's own status server needs its TrainJobStatus gate on, which
`make cluster` leaves off as Trainer ships it: not exercised here.)"""

from __future__ import annotations

import http.server
import json
import logging
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operator_client.contract import Progress
from operator_client.runtime import trainer_status
from operator_client.runtime.trainer_status import TrainerStatusReporter, payload

from .crd import crd_errors

PROGRESS = Progress(epoch=1, step=150, total=300, loss=0.0312, rate=50.0)
NOW = 1796540000.0  # seconds since the epoch


def test_the_body_is_what_the_trainjob_crd_takes() -> None:
    body = payload(PROGRESS, {"goodput": 0.4123456, "lastCheckpointStep": 100, "x": None}, NOW)
    status = body["trainerStatus"]
    assert status["progressPercentage"] == 50 and status["estimatedRemainingSeconds"] == 3
    assert status["lastUpdatedTime"].endswith("Z")  # the CRD's rule: always present
    assert {m["name"]: m["value"] for m in status["metrics"]} == {
        "loss": "0.0312",
        "step": "150",
        "epoch": "1",
        "goodput": "0.412346",
        "lastCheckpointStep": "100",
    }
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "job"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
        "status": body,
    }
    assert crd_errors(trainjob) == []
    # Unbounded: no percentage or time left, only what is known.
    unbounded = payload(Progress(epoch=0, step=7), {}, NOW)["trainerStatus"]
    assert set(unbounded) == {"lastUpdatedTime", "metrics"}
    long = payload(PROGRESS, {"n" * 80: 1.0}, NOW)["trainerStatus"]["metrics"][-1]
    assert len(long["name"]) == 64


def test_nothing_is_posted_where_the_gate_is_off() -> None:
    assert TrainerStatusReporter.from_env({}) is None
    assert TrainerStatusReporter.from_env({trainer_status.URL_ENV: "https://x"}) is None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path, list[dict[str, Any]]]]:
    """An HTTPS server with a self-signed certificate that records each POST's bearer
    token and body, as Trainer's status server receives them."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl (for a test certificate) is not installed")
    key, cert = tmp_path / "tls.key", tmp_path / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    received: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(
                {
                    "path": self.path,
                    "auth": self.headers["Authorization"],
                    "body": json.loads(self.rfile.read(length)),
                }
            )
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{httpd.server_address[1]}/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"
    try:
        yield url, cert, received
    finally:
        httpd.shutdown()


def test_posts_reach_the_endpoint_with_the_newest_token(
    server: tuple[str, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, cert, received = server
    token = tmp_path / "token"
    token.write_text("first\n")
    reporter = TrainerStatusReporter.from_env(
        {trainer_status.URL_ENV: url, trainer_status.CA_CERT_ENV: str(cert),
         trainer_status.TOKEN_ENV: str(token)}
    )  # fmt: skip
    assert reporter is not None
    asked = []

    def metrics() -> dict[str, float | int | None]:
        asked.append(1)
        return {"goodput": 0.5}

    reporter.offer(PROGRESS, metrics, now=True)
    reporter.offer(PROGRESS, metrics)  # not due: neither posted nor its metrics computed
    token.write_text("rotated\n")
    reporter.offer(PROGRESS, metrics, now=True)  # the last one: posted at once
    assert len(asked) == 2 and reporter.posted == 2 and not reporter.failed
    assert [r["auth"] for r in received] == ["Bearer first", "Bearer rotated"]
    assert received[0]["path"].endswith("/trainjobs/job/status")
    assert received[0]["body"]["trainerStatus"]["progressPercentage"] == 50


def test_a_controller_that_does_not_answer_never_fails_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("")
    reporter = TrainerStatusReporter(
        "https://127.0.0.1:9/x", str(tmp_path / "ca.crt"), str(tmp_path / "token")
    )
    with caplog.at_level(logging.WARNING, logger="kctl_train.runtime"):
        reporter.offer(PROGRESS, dict, now=True)
        reporter.offer(PROGRESS, dict, now=True)
    assert reporter.failed and reporter.posted == 0
    assert len([r for r in caplog.records if "not posted" in r.message]) == 1


def test_a_local_run_posts_its_progress_where_trainer_asks(
    server: tuple[str, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The worker as Trainer with the gate on would run it: the three variables in its
    environment (here from spec.env; as processes, so the pod reaches this machine's
    server), rank 0 posting; the last post says 100 %, with goodput and the checkpoint."""
    pytest.importorskip("lightning", reason="the runtime extra is not installed")
    from operator_client.backends.local.sandbox.support import MODE_ENV, PROCESS

    from .test_local_backend import job_file, kctl

    url, cert, received = server
    (tmp_path / "token").write_text("projected\n")
    path = job_file(
        tmp_path,
        "progress",
        f"""\
  train:
    model: operator_client.examples.regression:RegressionModel
    data: operator_client.examples.regression:RegressionData
    trainer: {{max_steps: 40, log_every_n_steps: 5}}
  nodes: 2
  checkpoint: {{every: 20 steps, keep: 2}}
  env:
    {trainer_status.URL_ENV}: {url}
    {trainer_status.CA_CERT_ENV}: {cert}
    {trainer_status.TOKEN_ENV}: {tmp_path / "token"}
""",
    )
    env = {**os.environ, "KCTL_TRAIN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    env[MODE_ENV] = PROCESS
    out = kctl("apply", str(path), "--local", "--wait", "--no-collect", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert received and {r["auth"] for r in received} == {"Bearer projected"}
    last = received[-1]["body"]["trainerStatus"]
    metrics = {m["name"]: m["value"] for m in last["metrics"]}
    assert last["progressPercentage"] == 100 and metrics["step"] == "40"
    assert metrics["lastCheckpointStep"] in ("20", "40") and 0 < float(metrics["goodput"]) < 1
