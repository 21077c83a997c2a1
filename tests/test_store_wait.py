"""A worker waits for rank 0's store before joining the process group, an agent for the
Master's rendezvous store before joining its next rendezvous (runtime/store_wait.py): the
rule on a fake clock, then against torch's real TCPStore."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from torch.distributed import TCPStore

from operator_client.backends.local.pods.process import free_port
from operator_client.runtime.store_wait import POLL_S, WAIT_S, await_port, await_store

STORE = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


class Refusing:
    """A connect() refused `times` times, then accepted; and a clock that sleep() moves."""

    def __init__(self, times: int) -> None:
        self.times, self.now, self.tried = times, 0.0, 0

    def connect(self, address: tuple[str, int], timeout: float) -> Any:
        assert address == ("127.0.0.1", 29500) and timeout > 0
        self.tried += 1
        if self.tried <= self.times:
            raise ConnectionRefusedError(111, "Connection refused")
        return self

    def close(self) -> None:
        pass

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("env", "refusals", "ready", "tries"),
    [
        (STORE, 0, True, 1),  # open already
        (STORE, 3, True, 4),  # open after three polls
        (STORE, 10**9, False, round(WAIT_S / POLL_S) + 1),  # never: torch's retries take over
        ({}, 0, False, 0),  # no store named (not under torchrun): nothing to wait for
        ({"MASTER_ADDR": "h", "MASTER_PORT": "x"}, 0, False, 0),
    ],
)
def test_a_worker_polls_rank_0s_port_until_it_opens_or_the_wait_ends(
    env: dict[str, str], refusals: int, ready: bool, tries: int
) -> None:
    fake = Refusing(refusals)
    assert await_store(env, connect=fake.connect, clock=lambda: fake.now, sleep=fake.sleep) is ready
    # The clock's sum of POLL_S may land a poll either side of WAIT_S.
    assert fake.tried == tries or (not ready and refusals and abs(fake.tried - tries) <= 1)


@pytest.mark.parametrize(("poll_s", "refusals", "ready"), [(0.1, 5, True), (1.0, 10**9, False)])
def test_an_agent_polls_the_rendezvous_port_at_its_pace(
    poll_s: float, refusals: int, ready: bool
) -> None:
    fake = Refusing(refusals)
    got = await_port(
        "127.0.0.1", 29500, poll_s, connect=fake.connect, clock=lambda: fake.now, sleep=fake.sleep
    )
    assert got is ready
    assert fake.tried == (refusals + 1 if ready else round(WAIT_S / poll_s) + 1)


def test_the_wait_ends_when_rank_0s_real_store_opens() -> None:
    """torch's TCPStore, opened 0.3 s after the worker began to wait: the wait returns
    only once it is open, and a client then joins it."""
    port = free_port()
    opening = threading.Event()
    opened: list[TCPStore] = []

    def rank_0() -> None:
        time.sleep(0.3)
        opening.set()  # nothing listens on the port before this
        store = TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=30), wait_for_workers=False)
        opened.append(store)

    thread = threading.Thread(target=rank_0)
    thread.start()
    assert await_store({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert opening.is_set(), "the wait returned before rank 0 opened its store"
    thread.join()
    client = TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
    client.set("joined", "yes")
    assert opened[0].get("joined") == b"yes"
