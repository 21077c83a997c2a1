"""The `kctl-train-runtime` console script: PID 1 of every replica pod.

The kernel drops a signal that PID 1 has no handler for, so a pod deleted while its Python
still imports (seconds on a busy node) would sit out its whole grace period. The handler is
set here, before anything heavy is imported; torchrun's agent replaces it once it runs.

Once the runtime has returned, the process leaves at once: the interpreter's own teardown
of torch and Lightning takes about a second, and a pod's exit is on the path of every
recovery that replaces it (a new pod starts only after the old one ended).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import NoReturn

from . import agent_clock


def _stop_early(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    """The runtime, then straight out with its exit code."""
    agent_clock.mark("agent_start")
    signal.signal(signal.SIGTERM, _stop_early)
    from .main import main as run

    leave(run())


def leave(code: int) -> NoReturn:
    """End the process with `code` once what it wrote is out, without the interpreter's
    teardown. The runtime's work is done by then: torchrun's agent has reaped its workers
    and its threads are daemons, and the workers flush their own logs and uploads."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
