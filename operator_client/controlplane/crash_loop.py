"""The kubelet's wait before it restarts a container in place (CrashLoopBackOff), as a pure
rule: the first restart is at once, each next one waits `first` seconds, doubling up to
`longest`, and a container that ran more than 2 x `longest` since its last restart starts
over. Read from Kubernetes v1.36's kubelet (kuberuntime_manager.go doBackOff over client-go's
flowcontrol.Backoff: no entry yet means no wait; 10 s doubling to 300 s, and 1 s to 60 s
under the ReduceDefaultCrashLoopBackOffDecay gate, alpha and off). The wait counts from the
container's exit. A pod the operator recreates (restartPolicy ExitCode) is a new pod, with
no back-off: lifecycle.Decision.in_place says which it is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CrashLoop:
    """One container's back-off: nothing before its first restart."""

    streak: int = 0  # restarts since the back-off last started over
    last_restart: float | None = None  # when the newest of them was due (seconds)


def next_restart(
    loop: CrashLoop, exited_at: float, first: float, longest: float
) -> tuple[float, CrashLoop]:
    """Seconds from `exited_at` (the container's exit) to its restart, and the back-off
    after that restart."""
    if loop.last_restart is None or exited_at - loop.last_restart > 2 * longest:
        return 0.0, CrashLoop(1, exited_at)
    wait = min(first * 2 ** (loop.streak - 1), longest)
    return wait, CrashLoop(loop.streak + 1, exited_at + wait)
