"""When this pod's agent (runtime/main.py) began and when it began its rendezvous with the
other pods, for the goodput account: Lightning workers are forked from the agent, inherit
these marks and record them as their first events (worker.py). Without them the agent's
seconds (importing torch and Lightning, checking the store, waiting for its peers) would
be booked as the container's start."""

from __future__ import annotations

import time

MARKS: dict[str, float] = {}


def mark(event: str) -> None:
    """Note that the agent reached `event` now (an event name of runstore/events.py)."""
    MARKS[event] = time.time()


def restart(event: str) -> None:
    """Begin the marks of the agent's next attempt at `event` (its joining a new
    rendezvous in process): the last attempt's, its imports' end included, are not this
    one's."""
    MARKS.clear()
    mark(event)
