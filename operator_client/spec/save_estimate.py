"""What an emergency save will need before any save of the job was measured: an estimate
from the checkpoint's size (spec.checkpoint.stateSize), split over the nodes that write it,
at cautious assumed rates. terminationGracePeriod: auto is sized from it, and validate
warns when it does not fit what a preempted pod gets; once a run has saved, its measured
budget (runstore/checkpoint_log.py) replaces the estimate at apply.

Whole MiB and integer arithmetic throughout: the Helm chart computes the same grace in Go
templates (charts/kctl-train/templates/pytorchjob.yaml), and the two must agree exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

MIB = 2**20
# The field the estimate comes from: validate's warning points at it, and apply drops that
# warning once a save is measured (client/grace.py).
STATE_SIZE_FIELD = ("spec", "checkpoint", "stateSize")
# Per pod, every rank of it together. Writing: an object-store upload from one node, on
# the cautious side of what S3 and GCS give a single client (a local disk is faster).
WRITE_MIB_PER_S = 100
# The snapshot: device to host memory (staging buffers), on the cautious side of PCIe.
SNAPSHOT_MIB_PER_S = 1024
# After the saves: the agent's exit after its workers and the agreement at the next batch
# boundary (the measured budget adds the same).
MARGIN_SECONDS = 3


@dataclass(frozen=True)
class SaveEstimate:
    """An emergency save as estimated for one pod: a save already in flight finishes its
    write, then the emergency save snapshots and writes, then the agent exits."""

    share_mib: int  # what one pod writes: the state over the fewest nodes, rounded up
    measured: ClassVar[bool] = False  # checkpoint_log.SaveBudget's is True

    @property
    def in_flight_s(self) -> float:
        return self.share_mib / WRITE_MIB_PER_S

    @property
    def save_s(self) -> float:
        return self.share_mib / SNAPSHOT_MIB_PER_S + self.share_mib / WRITE_MIB_PER_S

    @property
    def emergency_save_s(self) -> float:
        return self.in_flight_s + self.save_s + MARGIN_SECONDS

    @property
    def auto_grace_seconds(self) -> int:
        """1.5 x emergency_save_s (headroom: the rates are assumed), rounded up: multiplied
        out over 2 x WRITE x SNAPSHOT to stay in integers, as the chart computes it."""
        numerator = 3 * self.share_mib * (2 * SNAPSHOT_MIB_PER_S + WRITE_MIB_PER_S)
        numerator += 9 * WRITE_MIB_PER_S * SNAPSHOT_MIB_PER_S
        denominator = 2 * WRITE_MIB_PER_S * SNAPSHOT_MIB_PER_S
        return -(-numerator // denominator)

    def against(self, window: int | None) -> str:
        """In words, beside the seconds a preempted pod has to save (None: not known)."""
        return against(f"no save measured yet: {self.words()}", self.emergency_save_s, window)

    def words(self) -> str:
        """What the estimate is made of, for a warning."""
        return (
            f"an emergency save needs about {self.emergency_save_s:.0f}s by estimate "
            f"({self.share_mib} MiB per pod: a save in flight writing it, "
            f"{self.in_flight_s:.0f}s at an assumed {WRITE_MIB_PER_S} MiB/s, then a snapshot "
            f"at {SNAPSHOT_MIB_PER_S} MiB/s and the write, {self.save_s:.0f}s, and "
            f"{MARGIN_SECONDS}s to exit; the first save measures the real rates)"
        )


def estimate(state_bytes: int, nodes: int) -> SaveEstimate:
    """The estimate for a state of `state_bytes` written by `nodes` pods, each its share."""
    per_pod = nodes * MIB
    return SaveEstimate(-(-state_bytes // per_pod))


def against(needs: str, seconds: float, window: int | None) -> str:
    """What an emergency save needs (`needs`, in words; `seconds`) beside the seconds a
    preempted pod has (None: not known), measured or estimated alike."""
    if window is None:
        return needs
    fits = "fits" if seconds <= window else "does NOT fit: work would be lost"
    return f"{needs}; a preempted pod has {window}s: it {fits}"
