"""Rehearsing slow saves while training goes on (the tests, the crash fuzz and the benches
use it; a production run sets neither variable): the worker reads them at start and hands
the writer two waits (async_checkpoint.WriterConfig's before_write and before_upload).

KCTL_TRAIN_CHECKPOINT_WRITE_DELAY makes each save wait that many seconds before it writes
(a slow disk: every rank's write waits, since DCP plans collectively), and
KCTL_TRAIN_CHECKPOINT_UPLOAD_DELAY after it wrote, before its files go to the store (a slow
store: the other ranks' parts arrive first). A comma-separated list gives each save its
own (the last one repeats), e.g. `0,60`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

WRITE_DELAY_ENV = "KCTL_TRAIN_CHECKPOINT_WRITE_DELAY"
UPLOAD_DELAY_ENV = "KCTL_TRAIN_CHECKPOINT_UPLOAD_DELAY"


class Delays:
    """Seconds to wait at one point of each save, in turn (the last one repeats)."""

    def __init__(self, text: str | None) -> None:
        self.left = [float(d) for d in (text or "0").split(",")]

    def wait(self) -> None:
        seconds = self.left[0] if len(self.left) == 1 else self.left.pop(0)
        if seconds:
            time.sleep(seconds)


def save_delays(env: Mapping[str, str]) -> tuple[Delays, Delays]:
    """The waits before each save's write and before its upload that `env` asks for."""
    return Delays(env.get(WRITE_DELAY_ENV)), Delays(env.get(UPLOAD_DELAY_ENV))
