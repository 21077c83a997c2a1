"""The crash fuzz, seeded and short (bench/checkpoint_fuzz.py runs 200 trials and more):
20 kills of one rank, one pod, the whole job or a SIGTERMed pod, at random instants biased
to the stages of a save, each resumed from the newest committed checkpoint with every
committed checkpoint whole, each rank's own RNG and only the files its manifest names;
each job run to its end with every validation sample once per epoch (tests/crash_fuzz.py).
Real torchrun agents, gloo, Lightning."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the runtime extra (torch, lightning) is not installed")

from . import crash_fuzz


# Not beside the cluster's re-recording (tests/fidelity/test_recorded.py): two ranks and a
# watcher for 7 minutes slow the controllers it times on this 2-core machine.
@pytest.mark.xdist_group("heavy")
def test_twenty_seeded_kills_tear_nothing_and_resume_from_the_newest_commit(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    result = crash_fuzz.run(20, seed=31, workdir=tmp_path, say=said.append)
    report = "\n".join(said + result.lines())
    assert len(result.trials) == 20, report
    assert result.torn == 0 and result.resumed == 20, report
    assert result.ok, report
    assert report.endswith("20 trials, 0 torn, 20 resumed from the newest commit")
    # The kills did land across the save path, not all in one place.
    assert len({t.point for t in result.trials}) >= 3, report
    assert len({t.kind for t in result.trials}) >= 3, report


def test_seeded_kills_and_outages_on_s3_tear_nothing(tmp_path: Path) -> None:
    """The same checks on an S3 store (moto's server, through a proxy that answers 503
    while an outage lasts): each rank's files are uploaded after DCP wrote them, and an
    outage leaves whatever it left before a pod is killed."""
    said: list[str] = []
    result = crash_fuzz.run(8, seed=3, workdir=tmp_path, say=said.append, stores=("s3",))
    report = "\n".join(said + result.lines())
    assert len(result.trials) == 8 and {t.store for t in result.trials} == {"s3"}, report
    assert "outage" in {t.kind for t in result.trials}, report  # this seed draws one
    assert result.ok, report
    assert report.endswith("8 trials, 0 torn, 8 resumed from the newest commit")


@pytest.mark.parametrize(
    ("keys", "flight"),
    [
        (set(), None),
        ({"checkpoints/step-000000004/MANIFEST.json", "checkpoints/step-000000004/a"}, None),
        ({"checkpoints/step-000000004/MANIFEST.json", "checkpoints/step-000000008/a"}, 8),
        ({"checkpoints/step-000000008/parts/rank-0.json", "checkpoints/LATEST"}, 8),
    ],
)
def test_a_save_in_flight_is_one_begun_and_not_committed(
    keys: set[str], flight: int | None
) -> None:
    assert crash_fuzz.in_flight(keys) == flight
