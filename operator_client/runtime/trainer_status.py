"""Kubeflow Trainer's TrainJob progress (KEP-2779, `status.trainerStatus`, alpha behind the
controller's TrainJobStatus gate): where the gate is on, Trainer gives every trainer
container an HTTPS endpoint, its CA certificate and a projected service-account token
(KUBEFLOW_TRAINER_SERVER_URL, _CA_CERT, _TOKEN); rank 0 posts the progress, an estimate of
the time left and metrics (loss, goodput so far, the last committed checkpoint's step) there,
at most every POST_EVERY seconds, from a thread. Where the gate is off those variables are
absent and nothing is posted; a post that fails is logged once and never fails training.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..contract import Progress

log = logging.getLogger("kctl_train.runtime")

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
# Kubeflow's SDK posts at most every 5 s; a status every 15 s is plenty for a person and
# light on the controller, which updates the TrainJob for each.
POST_EVERY = 15.0
TIMEOUT = 5.0
Metrics = Callable[[], Mapping[str, float | int | None]]
# The CRD's limits: metric names and values of at most 64 characters, 256 metrics.
MAX_TEXT = 64


def payload(
    progress: Progress, metrics: Mapping[str, float | int | None], now: float
) -> dict[str, Any]:
    """The request body: `{"trainerStatus": {...}}` as the TrainJob CRD's trainerStatus
    (progress as a whole percentage, the time left from the step rate, metrics as text)."""
    status: dict[str, Any] = {
        "lastUpdatedTime": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    }
    if progress.total:
        status["progressPercentage"] = max(0, min(100, int(100 * progress.step / progress.total)))
        if progress.rate:
            left = max(0, progress.total - progress.step) / progress.rate
            status["estimatedRemainingSeconds"] = min(int(left), 2**31 - 1)
    values = {"loss": progress.loss, "step": progress.step, "epoch": progress.epoch, **metrics}
    status["metrics"] = [
        {"name": name[:MAX_TEXT], "value": _text(value)}
        for name, value in values.items()
        if value is not None
    ][:256]
    return {"trainerStatus": status}


def _text(value: float | int) -> str:
    return (f"{value:.6g}" if isinstance(value, float) else str(value))[:MAX_TEXT]


@dataclass
class TrainerStatusReporter:
    """Posts the newest status to Trainer's endpoint from a thread, at most every
    POST_EVERY seconds (the token re-read for each post: it rotates)."""

    url: str
    ca_cert: str
    token_path: str
    posted: int = 0
    failed: bool = False
    _due: float = 0.0
    _sending: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrainerStatusReporter | None:
        """The reporter Trainer asks for (None: the gate is off, or not on Trainer)."""
        url, ca, token = env.get(URL_ENV), env.get(CA_CERT_ENV), env.get(TOKEN_ENV)
        return cls(url, ca, token) if url and ca and token else None

    def offer(self, progress: Progress, metrics: Metrics, *, now: bool = False) -> None:
        """Post this status when one is due (`metrics` called only then; `now`: the last
        one, posted at once and waited for, briefly)."""
        clock = time.monotonic()
        busy = self._sending is not None and self._sending.is_alive()
        if busy or (clock < self._due and not now):
            return
        self._due = clock + POST_EVERY
        body = json.dumps(payload(progress, metrics(), time.time())).encode()
        self._sending = threading.Thread(target=self._post, args=(body,), daemon=True)
        self._sending.start()
        if now:
            self._sending.join(TIMEOUT)

    def _post(self, body: bytes) -> None:
        try:
            with open(self.token_path) as fh:
                token = fh.read().strip()
            request = urllib.request.Request(
                self.url,
                data=body,
                method="POST",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            context = ssl.create_default_context(cafile=self.ca_cert)
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as answer:
                answer.read()
            self.posted += 1
        except (OSError, ValueError) as exc:  # HTTPError and URLError are OSErrors
            if not self.failed:  # once: a controller that is down stays down for a while
                log.warning("TrainJob status not posted to %s: %s", self.url, exc)
            self.failed = True
