"""What an emergency save needs on a job (runstore/checkpoint_log.budget) and whether the
grace period holds it (runtime/callbacks.emergency_save_fits): pure rules, tables."""

from __future__ import annotations

import pytest

from operator_client.runstore import checkpoint_log


def row(stall: str, write: str, commit: str, size: str = "100") -> dict[str, str]:
    return {"step": "1", "stall_s": stall, "write_s": write, "commit_s": commit, "bytes": size}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], None),
        ([row("x", "1", "1"), row("1", "nan", "1"), {"step": "1"}], None),
        # One save of 0.5 + 2 + 0.5: one in flight needs its 2.5, this one 3, exit 3.
        ([row("0.5", "2", "0.5")], (1, 3.0, 2.5, 8.5)),
        # The 95th percentile of 20 saves is the 19th: one slow save of 20 is not it,
        # two are.
        ([row("0", "1", "0")] * 19 + [row("0", "9", "0")], (20, 1.0, 1.0, 5.0)),
        ([row("0", "1", "0")] * 18 + [row("0", "9", "0")] * 2, (20, 9.0, 9.0, 21.0)),
    ],
)
def test_the_budget_is_a_save_in_flight_then_one_more(
    rows: list[dict[str, str]], expected: tuple[int, float, float, float] | None
) -> None:
    found = checkpoint_log.budget(rows)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert (found.saves, found.save_s, found.in_flight_s, found.emergency_save_s) == expected
    assert found.size_bytes == 100


@pytest.mark.parametrize(
    ("measured", "grace", "since", "in_flight", "fits", "before"),
    [
        (False, 1.0, 0.0, True, True, 0.0),  # nothing measured yet: try
        # A save 3 s, one in flight 2.5 s more, and 3 s to exit.
        (True, 30.0, 0.0, True, True, 0.0),
        (True, 30.0, 21.5, True, True, 0.0),
        (True, 30.0, 21.6, True, False, 0.0),  # the stop came late in the grace period
        (True, 30.0, 24.0, False, True, 0.0),  # ... but nothing was in flight: 6 s suffice
        (True, 5.0, 0.0, False, False, 0.0),
        # After the epoch's validation (runtime/lightning_seams.validation_follows):
        (True, 30.0, 0.0, True, True, 21.5),
        (True, 30.0, 0.0, True, False, 21.6),
        (False, 30.0, 10.0, True, True, 20.0),  # no save measured: the validation fits
        (False, 30.0, 10.0, True, False, 20.5),
    ],
)
def test_a_save_is_started_only_when_the_grace_period_holds_it(
    measured: bool, grace: float, since: float, in_flight: bool, fits: bool, before: float
) -> None:
    pytest.importorskip("lightning", reason="the runtime extra is not installed")
    from operator_client.runtime.callbacks import emergency_save_fits

    budget = checkpoint_log.budget([row("0.5", "2", "0.5")]) if measured else None
    assert emergency_save_fits(budget, grace, since, in_flight, before) is fits


@pytest.mark.parametrize(
    ("window", "ends"),
    [
        (None, "and 3s to exit)"),
        (30, "; a preempted pod has 30s: it fits"),
        (8, "; a preempted pod has 8s: it does NOT fit: work would be lost"),
    ],
)
def test_the_budget_in_words_beside_the_window(window: int | None, ends: str) -> None:
    found = checkpoint_log.budget([row("0.5", "2", "0.5")])
    assert found is not None
    text = found.against(window)
    assert text.startswith("an emergency save needs 8.5s (a save in flight 2.5s, then one 3.0s")
    assert text.endswith(ends)


@pytest.mark.parametrize(
    ("now", "latest_signal", "needed", "over"),
    [
        # The wait began at t=100.
        (100.0, None, 6.0, False),  # no SIGTERM here (a stop was agreed, or none): wait on
        (110.0, 99.0, 6.0, False),  # the pod's own SIGTERM, before the wait: wait on
        (105.0, 103.0, 6.0, False),  # the agent tears down: a live peer still has time
        (106.0, 103.0, 6.0, True),  # ... and once a save's time passed, its part is lost
        (500.0, 103.0, None, False),  # nothing measured: the agent's timeout ends it
    ],
)
def test_rank_0_gives_a_commit_up_once_its_agent_tears_the_group_down(
    now: float, latest_signal: float | None, needed: float | None, over: bool
) -> None:
    pytest.importorskip("lightning", reason="the runtime extra is not installed")
    from operator_client.runtime.callbacks import commit_wait_over

    assert commit_wait_over(now, 100.0, latest_signal, needed) is over
