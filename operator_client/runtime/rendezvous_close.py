"""How the agents of a run that succeeded leave its rendezvous: together.

torchrun's agents end a run that succeeded with an exit barrier, then close the rendezvous,
both on the store that node 0's agent hosts (the c10d backend's `is_host`). Node 0's agent
goes on as soon as it passed both, and its store ends with its process: an agent a few
milliseconds behind then logs "Error waiting on exit barrier" with torch's traceback, or
"has failed to shutdown the rendezvous", at the end of a run that succeeded (seen in the
suite's killed-replica test: the barrier was 0.025 s old when the store went).

So each agent notes, past its exit barrier, the round's store and how many nodes the round
has; once it has closed the rendezvous, it counts itself out there, and the host's agent
waits until every node is out (at most CLOSE_WAIT_S, for a node that dies on its way out).
An agent whose run failed does not wait: its pod's exit is what starts the recovery. Both
hooks are torch's internals (no public setting exists): install() checks that they are
there and leaves torch as it is where they are not; tests/test_rendezvous_close.py fails
when a torch upgrade moves them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("kctl_train.runtime")

CLOSE_WAIT_S = 10.0
CLOSED_KEY = "kctl-train/closed"
_POLL_S = 0.02


def leave(store: Any, nodes: int, wait_s: float) -> bool:
    """Count this node out of the round's `store`; then, for `wait_s` seconds at most (the
    store's host), wait until all `nodes` are out. True once they are; False when the
    wait ran out or the store is gone."""
    deadline = time.monotonic() + wait_s
    try:
        out = int(store.add(CLOSED_KEY, 1))
        while out < nodes and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            out = int(store.add(CLOSED_KEY, 0))
    except RuntimeError:  # torch's DistError kinds: the store has gone
        return False
    return out >= nodes


def install(host: bool) -> bool:
    """Make this process's agent leave a run that succeeded as the module's docstring says
    (`host`: its node hosts the rendezvous store); False, and torch stays as it is, where
    torch does not look as expected."""
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    agent: Any = getattr(api, "SimpleElasticAgent", None)
    handler: Any = getattr(dr, "DynamicRendezvousHandler", None)
    barrier = getattr(agent, "_exit_barrier", None)
    shutdown = getattr(handler, "shutdown", None)
    if not callable(barrier) or not callable(shutdown):
        log.info("rendezvous: this torch's agent is not as expected; its own exit")
        return False
    finished: dict[str, Any] = {}

    def exit_barrier(self: Any) -> None:
        barrier(self)
        finished.update(store=self._store, nodes=self._worker_group.group_world_size)

    def close(self: Any) -> bool:
        closed = bool(shutdown(self))
        if finished:
            leave(finished["store"], finished["nodes"], CLOSE_WAIT_S if host else 0.0)
        return closed

    agent._exit_barrier, handler.shutdown = exit_barrier, close
    return True
