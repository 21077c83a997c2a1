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


def grace_warning(job: TrainingJob, source: str) -> SpecIssue | None:
    """A warning when the grace period is shorter than what an emergency save needs on
    this run, measured (checkpoint_log.budget: a save in flight, then the emergency save,
    each the 95th percentile of the saves so far); None when it is long enough, or the
    store has no measurement or cannot be reached now (quickly)."""
    try:
        store = store_for(job, patience=0.0)
        store.probe()
        found = checkpoint_log.budget(checkpoint_log.read(store))
    except (StoreError, KctlTrainError):
        return None
    if found is None:
        return None
    spec = job.spec
    window = spec.save_window_seconds
    if window >= found.emergency_save_s:
        return None
    wanted = math.ceil(found.emergency_save_s * 1.5)
    if spec.spot_notice_seconds == window:
        what = f"{window}s, the {spec.node_pool.preset} spot notice,"
        longer = f"a pool without spot (nodePool.spot: false) with a grace of {wanted}s"
    else:
        what = f"{window}s"
        longer = f"give at least {wanted}s"
    return SpecIssue(
        source,
        0,
        0,
        "spec.fault.terminationGracePeriod",
        f"{what} is shorter than an emergency save needs on this run "
        f"({found.emergency_save_s:.1f}s: a save in flight finishing, "
        f"{found.in_flight_s:.1f}s, then the emergency save, {found.save_s:.1f}s, each the "
        f"95th percentile of {found.saves} saves in {checkpoint_log.KEY}, and "
        f"{checkpoint_log.MARGIN_SECONDS:.0f}s to exit): a preempted pod would not save, and "
        f"the work since the last checkpoint is lost; {longer}, save less per rank (more "
        "nodes), take checkpoint.whenBusy: skip (no save in flight to wait for), or save "
        "more often (less to lose)",
        "warning",
    )
