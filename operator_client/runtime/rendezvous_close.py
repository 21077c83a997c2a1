"""How a pod's agent leaves the rendezvous: together at the end of a run that succeeded,
and without closing it when it lost the store.

- torchrun's agents end a run that succeeded with an exit barrier, then close the
  rendezvous, both on the store that node 0's agent hosts (the c10d backend's `is_host`).
  Node 0's agent goes on as soon as it passed both, and its store ends with its process: an
  agent a few milliseconds behind then logs "Error waiting on exit barrier" with torch's
  traceback, or "has failed to shutdown the rendezvous", at the end of a run that
  succeeded (seen in the suite's killed-replica test: the barrier was 0.025 s old when the
  store went). So each agent notes, past its exit barrier, the round's store and how many
  nodes the round has; once it has closed the rendezvous, it counts itself out there, and
  the host's agent waits until every node is out (at most CLOSE_WAIT_S, for a node that
  dies on its way out).
- An agent that fails closes the rendezvous too (torch's launch_agent, unless a signal
  ended it), and a closed rendezvous ends every other node's agent: the Master's pod then
  restarts, a new pod importing torch and Lightning. An agent that lost its store (a
  partition longer than the store's 60 s timeout) joins the next round instead, in its
  process or as its pod's restart (main.run_agent): it leaves its round, as torch's own
  next_rendezvous does, and does not close it.

Both hooks are torch's internals (no public setting exists): install() checks that they are
there and leaves torch as it is where they are not; tests/test_rendezvous_close.py fails
when a torch upgrade moves them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any

log = logging.getLogger("kctl_train.runtime")

CLOSE_WAIT_S = 10.0
CLOSED_KEY = "kctl-train/closed"
_POLL_S = 0.02
# The handler's methods the hooks call (its _op_executor and _settings are per instance:
# tests/test_rendezvous_close.py runs the hooks on torch's real handler).
_HANDLER_METHODS = ("_stop_heartbeats", "_get_deadline")


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
    """Make this process's agent leave the rendezvous as the module's docstring says
    (`host`: its node hosts the rendezvous store); False, and torch stays as it is, where
    torch does not look as expected."""
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.rendezvous import api as rendezvous_api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    agent: Any = getattr(api, "SimpleElasticAgent", None)
    handler: Any = getattr(dr, "DynamicRendezvousHandler", None)
    exit_op: Any = getattr(dr, "_RendezvousExitOp", None)
    barrier: Any = getattr(agent, "_exit_barrier", None)
    shutdown: Any = getattr(handler, "shutdown", None)
    parts = [barrier, shutdown, exit_op, *(getattr(handler, n, None) for n in _HANDLER_METHODS)]
    if not all(callable(part) for part in parts):
        log.info("rendezvous: this torch's agent is not as expected; its own exit")
        return False
    lost = rendezvous_api.RendezvousConnectionError
    finished: dict[str, Any] = {}

    def exit_barrier(self: Any) -> None:
        barrier(self)
        finished.update(store=self._store, nodes=self._worker_group.group_world_size)

    def close(self: Any) -> bool:
        if isinstance(sys.exc_info()[1], lost):  # launch_agent's finally, on its way out
            self._stop_heartbeats()
            with contextlib.suppress(rendezvous_api.RendezvousError):
                deadline = self._get_deadline(self._settings.timeout.close)
                self._op_executor.run(exit_op(), deadline)
            return False
        closed = bool(shutdown(self))
        if finished:
            leave(finished["store"], finished["nodes"], CLOSE_WAIT_S if host else 0.0)
        return closed

    agent._exit_barrier, handler.shutdown = exit_barrier, close
    return True
