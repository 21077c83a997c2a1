"""The ranks' agreement cadence (runtime/agreement.py): about every 0.1 s of training, the
batch of the next agreement settled at each one."""

from __future__ import annotations

import pytest

from operator_client.runtime.agreement import MOST_BATCHES, Cadence, batches_for


@pytest.mark.parametrize(
    ("seconds", "batches", "expected"),
    [
        (0.08, 1, 1),  # the fault bench's steps: every batch
        (0.8, 10, 1),
        (10.0, 10, 1),  # one-second steps: every batch, not every ten seconds
        (0.01, 1, 10),
        (0.1, 100, 100),  # a millisecond a batch: capped
        (0.0001, 100, MOST_BATCHES),
        (0.0, 1, MOST_BATCHES),  # a clock that did not move
        (0.05, 2, 4),
    ],
)
def test_batches_for_makes_about_a_tenth_of_a_second(
    seconds: float, batches: int, expected: int
) -> None:
    assert batches_for(seconds, batches) == expected


def test_a_cadence_agrees_at_the_first_batch_then_as_agreed() -> None:
    cadence = Cadence(since=0.0)
    assert cadence.due()  # the first batch: nothing is known of the pace yet
    assert cadence.proposal(0.01) == 10
    cadence.agreed(3, now=0.01)  # another rank is slower: the smallest proposal wins
    assert [cadence.due() for _ in range(3)] == [False, False, True]
    assert cadence.proposal(0.04) == 10  # 3 batches in 0.03 s
    cadence.agreed(0, now=0.04)  # never fewer than one batch
    assert cadence.due()
