"""Whether a preempted pod has time to save: a job's terminationGracePeriod against the
last checkpoint save its run measured (metrics/checkpoints.csv), checked at apply."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import KctlTrainError
from ..runstore import checkpoint_log
from ..runstore.location import store_for
from ..spec.issues import SpecIssue
from ..spec.save_estimate import MARGIN_SECONDS, STATE_SIZE_FIELD
from ..storage import StoreError

if TYPE_CHECKING:
    from ..spec.model import TrainingJob


# The path of validate's estimate warning, which a measured budget replaces.
ESTIMATE_PATH = ".".join(STATE_SIZE_FIELD)


def measured_budget(job: TrainingJob) -> checkpoint_log.SaveBudget | None:
    """What an emergency save needs on this run, measured (checkpoint_log.budget: a save
    in flight, then the emergency save, each the 95th percentile of the saves so far);
    None when nothing is measured yet, or the store cannot be reached now (quickly)."""
    try:
        store = store_for(job, patience=0.0)
        store.probe()
        return checkpoint_log.budget(checkpoint_log.read(store))
    except (StoreError, KctlTrainError):
        return None


def grace_warning(
    job: TrainingJob, found: checkpoint_log.SaveBudget, source: str
) -> SpecIssue | None:
    """A warning when the grace period is shorter than the measured budget `found`;
    None when it is long enough."""
    spec = job.spec
    window = spec.save_window_seconds
    if window >= found.emergency_save_s:
        return None
    what, advice = spec.short_window(math.ceil(found.emergency_save_s * 1.5))
    return SpecIssue(
        source,
        0,
        0,
        "spec.fault.terminationGracePeriod",
        f"{what} is shorter than an emergency save needs on this run "
        f"({found.emergency_save_s:.1f}s: a save in flight finishing, "
        f"{found.in_flight_s:.1f}s, then the emergency save, {found.save_s:.1f}s, each the "
        f"95th percentile of {found.saves} saves in {checkpoint_log.KEY}, and "
        f"{MARGIN_SECONDS:.0f}s to exit): a preempted pod would not save, and the work "
        f"since the last checkpoint is lost; {advice}",
        "warning",
    )
