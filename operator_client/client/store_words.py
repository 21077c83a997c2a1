"""What a run's store says about a job, in words: its goodput so far, what an emergency
save needs beside the time a preempted pod has, and what the newest SIGTERM did. `status`
prints them and the live view redraws two of them (LiveWords); a Python caller reads the
same."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import KctlTrainError
from ..runstore.goodput import preemption_line

if TYPE_CHECKING:
    from ..backends.types import JobView
    from ..runstore.checkpoint_log import SaveBudget
    from ..spec.save_estimate import SaveEstimate
    from .handle import JobHandle


@dataclass(frozen=True)
class StoreWords:
    """One read of the job's store; "" (or None) where it has nothing to say: no store, no
    events yet, a store this machine cannot read, no SIGTERM, a job that is gone."""

    goodput: str = ""  # goodput 41% so far (63s productive of 154 rank-seconds)
    sigterm: str = ""  # what the newest SIGTERM did (runstore/goodput.py)
    budget: SaveBudget | SaveEstimate | None = None  # measured, else by estimate
    window: int | None = None  # the pod's terminationGracePeriodSeconds

    def lines(self) -> list[str]:
        """The goodput, the save budget against the window, the SIGTERM: those there are."""
        budget = self.budget.against(self.window) if self.budget else ""
        return [line for line in (self.goodput, budget, self.sigterm) if line]

    def live(self) -> str:
        """The live view's short form: `goodput … · emergency save 4.2s of 30s`."""
        save = ""
        if self.budget is not None:
            has = f" of {self.window}s" if self.window is not None else ""
            guess = "" if self.budget.measured else " by estimate"
            save = f"emergency save {self.budget.emergency_save_s:.1f}s{guess}{has}"
        return " · ".join(t for t in (self.goodput, save) if t)


def store_words(handle: JobHandle, view: JobView | None = None) -> StoreWords:
    """What the job's store says now, for the job's `view` (None: read now); empty words
    where the job is gone."""
    try:
        view = view if view is not None else handle.status()
    except KctlTrainError:
        return StoreWords()
    goodput, sigterm = _goodput(handle, view)
    return StoreWords(goodput, sigterm, _budget(handle, view), handle.save_window(view))


def store_words_within(
    handle: JobHandle, timeout: float, view: JobView | None = None
) -> StoreWords:
    """store_words, if the store answers within `timeout` seconds (one that retries for a
    minute must not hold `status` up); empty words otherwise."""
    said: list[StoreWords] = []
    reader = threading.Thread(target=lambda: said.append(store_words(handle, view)), daemon=True)
    reader.start()
    reader.join(timeout)
    return said[0] if said else StoreWords()


class LiveWords:
    """The live view's short form of the store's words, read in the background every
    `every` seconds, so a redrawn line never waits on the store."""

    def __init__(self, handle: JobHandle, every: float = 20.0) -> None:
        self.handle = handle
        self.every = every
        self.text = ""
        self._next = 0.0
        self._reading = False

    def poll(self) -> str:
        """The newest words, starting a read when one is due."""
        if not self._reading and time.monotonic() >= self._next:
            self._reading = True
            threading.Thread(target=self._read, daemon=True).start()
        return self.text

    def _read(self) -> None:
        try:
            self.text = store_words(self.handle).live() or self.text
        finally:
            self._next = time.monotonic() + self.every
            self._reading = False


def _goodput(handle: JobHandle, view: JobView) -> tuple[str, str]:
    try:
        found = handle.goodput(view=view)
    except KctlTrainError:
        return "", ""
    if found is None or found.total <= 0:
        return "", ""
    return (
        f"goodput {found.goodput:.0%} so far ({found.categories['productive']:.0f}s "
        f"productive of {found.total:.0f} rank-seconds)",
        preemption_line(found) or "",
    )


def _budget(handle: JobHandle, view: JobView) -> SaveBudget | SaveEstimate | None:
    try:
        return handle.save_budget(view=view) or handle.save_estimate(view)
    except KctlTrainError:
        return None
