"""The `kctl-train-runtime` console script: PID 1 of every replica pod.

The kernel drops a signal that PID 1 has no handler for, so a pod deleted while its Python
still imports (seconds on a busy node) would sit out its whole grace period. The handler is
set here, before anything heavy is imported; torchrun's agent replaces it once it runs.
"""

from __future__ import annotations

import signal

from . import agent_clock


def _stop_early(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    agent_clock.mark("agent_start")
    signal.signal(signal.SIGTERM, _stop_early)
    from .main import main as run

    return run()
