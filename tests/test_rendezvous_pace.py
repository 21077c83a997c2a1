"""The pace at which a pod's agent reads the rendezvous state (runtime/rendezvous_pace.py),
on torch's real c10d rendezvous: two nodes, a real TCPStore, one joining late."""

from __future__ import annotations

import time
from typing import Any

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

from operator_client.backends.local.pods.process import free_port
from operator_client.runtime.rendezvous_pace import interval, pace

from .rendezvous_nodes import both, handler


@pytest.mark.parametrize(
    ("nodes", "seconds"), [(1, 0.1), (2, 0.1), (10, 0.1), (50, 0.5), (100, 1.0), (5000, 1.0)]
)
def test_the_pace_reads_the_store_at_most_as_torch_does_at_100_nodes(
    nodes: int, seconds: float
) -> None:
    assert interval(nodes) == seconds
    # All nodes' reads a second: at most 100, or torch's own rate where that is more.
    assert nodes / interval(nodes) <= max(100, nodes)


@pytest.fixture
def torch_internals(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """dynamic_rendezvous as it was after the test; the waits it asks for, recorded."""
    waits: list[Any] = []
    original = dr._delay

    def recorded(seconds: Any) -> None:
        waits.append(seconds)
        original(seconds=seconds)

    monkeypatch.setattr(dr, "_delay", recorded)
    monkeypatch.setattr(dr, "_BackendRendezvousStateHolder", dr._BackendRendezvousStateHolder)
    return waits


def test_two_nodes_meet_at_the_pace_and_torchs_rendezvous_still_works(
    torch_internals: list[Any],
) -> None:
    """The host joins first and polls until the second node joins 0.6 s later: every poll
    waits 0.1 s, not torch's second, and both nodes leave with their ranks of 2."""
    assert pace(2)
    port, met = free_port(), {}

    def node(host: bool) -> None:
        if not host:
            time.sleep(0.6)
        node_handler = handler(port, "pace", host)
        info = node_handler.next_rendezvous()
        met[host] = (info.rank, info.world_size, node_handler._state_holder._cache_duration)
        time.sleep(0.3)  # the other node reads the host's store before it goes
        node_handler.shutdown()

    failed = both(node)
    assert not failed and len(met) == 2, failed
    assert sorted(rank for rank, _, _ in met.values()) == [0, 1]
    assert {(size, cache) for _, size, cache in met.values()} == {(2, 0.1)}
    polls = [w for w in torch_internals if not isinstance(w, tuple)]  # not the first skew
    assert polls and set(polls) == {0.1}, torch_internals


def test_a_torch_that_does_not_look_as_expected_keeps_its_own_pace(
    torch_internals: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Moved:
        def __init__(self, backend: Any, settings: Any, cache_seconds: float = 2.0) -> None:
            pass

    monkeypatch.setattr(dr, "_BackendRendezvousStateHolder", Moved)
    waits = dr._delay
    assert not pace(2)
    assert dr._delay is waits and dr._BackendRendezvousStateHolder is Moved
