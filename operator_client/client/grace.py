"""Whether a preempted pod has time to save: a job's terminationGracePeriod against the
last checkpoint save its run measured (metrics/checkpoints.csv), checked at apply."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import KctlTrainError
from ..runstore import checkpoint_log
from ..runstore.location import store_for
from ..spec.issues import SpecIssue
from ..storage import StoreError

if TYPE_CHECKING:
    from ..spec.model import TrainingJob

# Beyond the save itself: the agent's own exit after its workers (runtime/main.py).
MARGIN_SECONDS = 3.0


def grace_warning(job: TrainingJob, source: str) -> SpecIssue | None:
    """A warning when the grace period is shorter than the run's last save (preferring an
    emergency one) took from the training thread's stop to its commit; None when it is
    long enough, or the store has no measurement or cannot be reached now (quickly)."""
    try:
        store = store_for(job, patience=0.0)
        store.probe()
        rows = checkpoint_log.read(store)
    except (StoreError, KctlTrainError):
        return None
    last = checkpoint_log.last_save(rows)
    if last is None:
        return None
    seconds, emergency = last
    grace = job.spec.fault.termination_grace_period.seconds
    if grace >= seconds + MARGIN_SECONDS:
        return None
    which = "emergency checkpoint" if emergency else "last checkpoint save"
    wanted = math.ceil((seconds + MARGIN_SECONDS) * 1.5)
    return SpecIssue(
        source,
        0,
        0,
        "spec.fault.terminationGracePeriod",
        f"{grace}s is shorter than this run's {which} took ({seconds:.1f}s from the stop to "
        f"its commit, {checkpoint_log.KEY}): a preempted pod would be killed before it "
        f"commits; give at least {wanted}s",
        "warning",
    )
