"""Names, numbers and line formats shared by the layers (render, runtime, backends,
collect, client): defined once here, imported wherever they are used.

Pure: importing this module costs nothing (json and dataclasses only).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

# The trainer container: its program and what the renderer puts in its environment.
RUNTIME_COMMAND = ("kctl-train-runtime",)
# Pod restarts before a job fails: the spec's default (fault.backoffLimit), which is also
# the backoffLimit of kctl-train's Trainer v2 runtime (Kubernetes' own Job default).
DEFAULT_BACKOFF_LIMIT = 6
# The whole job, as canonical JSON (the runtime reads it back; spec/document.py).
SPEC_ENV = "KCTL_TRAIN_SPEC"
# The pod's IP from the downward API: torchrun's --local-addr, so rendezvous peers reach
# this pod by IP and not by a hostname only it can resolve (docs/OPERATOR_CONTRACT.md).
POD_IP_ENV = "KCTL_TRAIN_POD_IP"
# The c10d rendezvous' keep-alive: a lost node is noticed in about 3 s, not 15 s (the
# 5 s x 3 default), and late joiners may take 10 minutes (image pulls).
RDZV_CONF = {"join_timeout": "600", "keep_alive_interval": "1", "keep_alive_max_attempt": "3"}

# Annotations of a rendered job: where its run's objects are, so a client that knows only
# the job's name can collect it.
SPEC_HASH_ANNOTATION = "kctl-train.io/spec-hash"
RUN_ROOT_ANNOTATION = "kctl-train.io/run-root"
ENDPOINT_ANNOTATION = "kctl-train.io/storage-endpoint"
REGION_ANNOTATION = "kctl-train.io/storage-region"

# Where a container writes why it failed: Kubernetes' default terminationMessagePath. The
# kubelet reports its content as the container's terminated.message; the local backend
# points the runtime at a file of its own through TERMINATION_LOG_ENV.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_ENV = "KCTL_TRAIN_TERMINATION_LOG"

# 128 + SIGTERM: retried by restartPolicy ExitCode and OnFailure, never taken for success.
EXIT_PREEMPTED = 143
# A worker whose attempt was superseded by a newer one (a second writer): it stops
# without committing anything more.
EXIT_SUPERSEDED = 3
# A worker that could not write (a full disk, a read-only store): retried like any failure.
EXIT_IO_ERROR = 4


def checkpoint_name(step: int) -> str:
    """A checkpoint's directory name, in the store and in scratch: sorts by step."""
    return f"step-{step:012d}"


# Training progress travels in the replicas' logs as one JSON line each, marked with
# this tag, so that any backend's log stream carries it and no client parses prose.
PROGRESS_TAG = "kctl-train.progress"


@dataclass(frozen=True)
class Progress:
    """Where training is: written by rank 0 every log_every_n_steps steps."""

    epoch: int
    step: int
    total: int | None = None  # max_steps, when bounded
    loss: float | None = None
    rate: float | None = None  # steps per second since this attempt started

    def line(self) -> str:
        """The log line: the tag, then compact JSON."""
        body = {k: v for k, v in asdict(self).items() if v is not None}
        return f"{PROGRESS_TAG} {json.dumps(body, separators=(',', ':'))}"

    @classmethod
    def parse(cls, line: str) -> Progress | None:
        """The progress a log line reports (after any prefix a launcher adds), or None."""
        at = line.find(PROGRESS_TAG + " ")
        if at < 0:
            return None
        try:
            body = json.loads(line[at + len(PROGRESS_TAG) + 1 :])
            return cls(
                epoch=int(body["epoch"]),
                step=int(body["step"]),
                total=None if body.get("total") is None else int(body["total"]),
                loss=None if body.get("loss") is None else float(body["loss"]),
                rate=None if body.get("rate") is None else float(body["rate"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def newest(cls, lines: Iterable[str]) -> Progress | None:
        """The last progress any of `lines` reports (None: none does)."""
        found = None
        for line in lines:
            found = cls.parse(line) or found
        return found

    def text(self) -> str:
        """For people: `epoch 2, step 120/300, loss 0.0312, 78.1 steps/s`."""
        parts = [f"epoch {self.epoch}", f"step {self.step}/{self.total or '?'}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.rate is not None:
            parts.append(f"{self.rate:.1f} steps/s")
        return ", ".join(parts)


# Faults a local job's replicas can be given to rehearse failures (`kctl-train chaos`,
# JobHandle.inject): SIGKILL every process; cut the network; add latency and loss; undo.
KILL, PARTITION, SLOW, HEAL = "kill", "partition", "slow", "heal"
FAULTS = (KILL, PARTITION, SLOW, HEAL)


@dataclass(frozen=True)
class ImageRoot:
    """An image's root filesystem to run the replicas from, with the image's config: what
    `kctl-train build` hands a local backend (Backend.use_image). Here, below both, so the
    image builders need no backend to make one."""

    path: str
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
