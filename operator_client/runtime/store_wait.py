"""Waiting for a store's port to open before torch connects to it: rank 0's store before
a worker joins the process group, and the Master's rendezvous store before an agent joins
its next rendezvous (main.py).

Every worker of a run connects to the TCPStore that rank 0's worker opens in its
init_process_group. A worker that asks before the store is open is refused, and torch's
client tries again only after a jittered backoff of about half a second (0.4-0.6 s
measured here), which every rank then waits out in init_process_group. The workers of a new
pod are forked at the same instant as rank 0's, so that was most starts: 0.7 s from
rendezvous_start to rendezvous_end, 0.03 s where the store was already open. Polling the
port first makes the join as quick as the store is. The rendezvous store's client backs off
the same way, growing by half each time: an agent that waited seconds for a restarted
Master joined its rendezvous up to two seconds after it opened (1.3 s measured here).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

POLL_S = 0.02
# Past this, torch's own retries pace the join (and say what is wrong, when it is).
WAIT_S = 10.0


def await_store(env: Mapping[str, str], **seams: Any) -> bool:
    """Return once MASTER_ADDR:MASTER_PORT accepts a connection (True); False at once
    where the environment names no store, or after WAIT_S."""
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
    if not addr or not port.isdigit():
        return False
    return await_port(addr, int(port), POLL_S, **seams)


def await_port(
    host: str,
    port: int,
    poll_s: float,
    *,
    connect: Callable[..., Any] = socket.create_connection,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Return once host:port accepts a connection (True), trying every `poll_s` seconds;
    False after WAIT_S."""
    deadline = clock() + WAIT_S
    while True:
        try:
            connect((host, port), timeout=1.0).close()
            return True
        except OSError:
            if clock() >= deadline:
                return False
            sleep(poll_s)
