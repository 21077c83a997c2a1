"""How often the pod's agent reads the rendezvous state, while it waits for the other pods
and while it watches them.

torchrun's c10d rendezvous (torch.distributed.elastic.rendezvous.dynamic_rendezvous) reads
its state from the store at most once a second (the state holder's cache), sleeps a fixed
second between reads while nodes join, and the agent's monitor asks that same cached state
whether a restarted node waits to join. None of it has a setting. So each pod saw the last
one to join, and a running pod a restarted peer, up to a second or two late, at every start
and every restart: two processes joining a 2-node rendezvous at the same instant took
1.06-1.15 s to complete it, 0.20-0.27 s at the pace below (measured on this machine).

The pace is `nodes / 100` seconds, at least PACE_MIN_S and at most torch's second: all
nodes together then read the master's store at most 100 times a second, which is torch's
own rate at 100 nodes, and a job of 100 nodes or more keeps torch's pace. Both are torch's
internals (no public setting exists): pace() checks that they are as expected and leaves
torch's pace where they are not; tests/test_rendezvous_pace.py fails when a torch upgrade
moves them.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("kctl_train.runtime")

PACE_MIN_S = 0.1
TORCH_PACE_S = 1  # the state cache's and the poll's seconds in dynamic_rendezvous
READS_PER_SECOND = 100  # all nodes together, at most


def interval(nodes: int) -> float:
    """Seconds between the agent's reads of the rendezvous state, for `nodes` nodes."""
    return min(float(TORCH_PACE_S), max(PACE_MIN_S, nodes / READS_PER_SECOND))


def pace(max_nodes: int) -> bool:
    """Read the rendezvous state every interval(max_nodes) seconds in this process (the
    agent); False, and torch's pace stands, where this torch does not look as expected."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    holder: Any = getattr(dr, "_BackendRendezvousStateHolder", None)
    wait = getattr(dr, "_delay", None)
    if not callable(wait) or getattr(holder.__init__, "__defaults__", None) != (TORCH_PACE_S,):
        log.info("rendezvous: this torch's c10d rendezvous is not as expected; torch's pace")
        return False
    pause = interval(max_nodes)

    class Holder(holder):  # type: ignore[misc]
        def __init__(self, backend: Any, settings: Any, cache_duration: float = pause):
            super().__init__(backend, settings, cache_duration)

    def poll(seconds: Any) -> None:  # torch passes it by name
        # Only the fixed second between polls; the random skew before a first join stays.
        wait(seconds=pause if seconds == TORCH_PACE_S else seconds)

    dr._BackendRendezvousStateHolder, dr._delay = Holder, poll
    return True
