"""How often the ranks agree, at a batch's end, on whether any of them was told to stop
(SIGTERM) and whether a wall-time checkpoint is due: one small all-reduce on the control
group (callbacks.py), about every AGREE_SECONDS of training.

A fixed count of batches made the stop wait up to that many steps (0.8 s of the fault
bench's 0.08 s steps, ten seconds of one-second steps), time a SIGTERM's grace period
needs for the save. A rank cannot decide by its own clock when to agree (a collective
that one rank skips hangs the others), so each agreement also settles the next one's
batch: every rank proposes how many batches make AGREE_SECONDS at its pace, and all take
the smallest (the all-reduce's MAX of the negated proposals).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

AGREE_SECONDS = 0.1
# Even where a batch takes a millisecond: a SIGTERM is seen within this many batches.
MOST_BATCHES = 100


def batches_for(seconds: float, batches: int) -> int:
    """Batches that take about AGREE_SECONDS, at `batches` in `seconds` (1 to MOST_BATCHES)."""
    if seconds <= 0:
        return MOST_BATCHES
    return max(1, min(MOST_BATCHES, int(AGREE_SECONDS * batches / seconds)))


@dataclass
class Cadence:
    """When this rank's next agreement is: the same batch on every rank, as agreed."""

    every: int = 1
    left: int = 1
    since: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        """Count a batch's end; whether the ranks agree at this one."""
        self.left -= 1
        return self.left <= 0

    def proposal(self, now: float) -> int:
        """This rank's batches until the next agreement, from its pace since the last."""
        return batches_for(now - self.since, self.every)

    def agreed(self, batches: int, now: float) -> None:
        """The ranks agreed on `batches` until the next agreement."""
        self.every = self.left = max(1, batches)
        self.since = now
