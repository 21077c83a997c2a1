"""How a pod's agent leaves the rendezvous (runtime/rendezvous_close.py), on torch's real
c10d rendezvous and exit barrier: two nodes in threads, the host's TCPStore."""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import api
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

from operator_client.backends.local.pods.process import free_port
from operator_client.runtime.rendezvous_close import CLOSED_KEY, install, leave

from .rendezvous_nodes import both, handler


@pytest.fixture
def torch_internals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's exit barrier and the rendezvous' shutdown as they were, after the test;
    the rendezvous' stores as a pod's agent has them (runtime/main.py's agent_env): a
    handler that shares its TCP store keeps the first round's bootstrap, so a next round
    whose rank 0 is another node would wait for a MASTER_ADDR nobody writes."""
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    agent, handler = api.SimpleElasticAgent, dr.DynamicRendezvousHandler
    monkeypatch.setattr(agent, "_exit_barrier", agent._exit_barrier)
    monkeypatch.setattr(handler, "shutdown", handler.shutdown)


def test_the_host_leaves_once_the_node_behind_it_has_closed_the_rendezvous(
    torch_internals: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The other node reaches the exit barrier late and closes the rendezvous later still:
    the host's agent, done first, keeps its store until that node is out, and neither logs
    an error. Both run torch's own exit barrier (on a stand-in agent) and shutdown."""
    caplog.set_level(logging.INFO)
    assert install(host=True)  # once per process, as each pod's agent does
    port, host_saw = free_port(), []

    def node(host: bool) -> None:
        node_handler = handler(port, "close", host)
        info = node_handler.next_rendezvous()
        agent = SimpleNamespace(
            _store=info.store, _exit_barrier_timeout=30, _in_exit_barrier=False,
            _worker_group=SimpleNamespace(group_world_size=2, state="SUCCEEDED"),
        )  # fmt: skip
        if not host:
            time.sleep(0.3)  # the slower node's workers finish later
        api.SimpleElasticAgent._exit_barrier(agent)
        if not host:
            time.sleep(0.5)  # and it is slower to close
        node_handler.shutdown()
        if host:  # its store still open: how many nodes had closed when it went on
            host_saw.append(int(info.store.add(CLOSED_KEY, 0)))

    failed = both(node)
    assert not failed, failed
    assert host_saw == [2]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, errors


def test_an_agent_that_lost_the_store_leaves_its_round_and_does_not_close_it(
    torch_internals: None,
) -> None:
    """The other node's agent fails with the store lost (the error torch's launch_agent is
    on its way out with when it shuts the handler down), then rejoins with a new handler,
    as run_agent does. Closed, the rendezvous would refuse the host's next round; with that
    node still a participant of the last one, the host would wait out its keep-alive (60 s
    here, past the 20 s join timeout). Both meet in the next round instead."""
    assert install(host=False)
    port, met, failed_over = free_port(), {}, threading.Event()
    together = threading.Barrier(2, timeout=30)
    timing = {"join_timeout": "20", "keep_alive_interval": "60"}

    def node(host: bool) -> None:
        node_handler = handler(port, "lost", host, **timing)
        node_handler.next_rendezvous()
        if host:
            failed_over.wait(30)  # its workers fail with the other's: it restarts them
        else:
            with contextlib.suppress(RendezvousConnectionError):
                try:
                    raise RendezvousConnectionError("the store is lost")
                finally:
                    node_handler.shutdown()
            failed_over.set()
            node_handler = handler(port, "lost", host, **timing)  # run_agent's next launch
        met[host] = node_handler.next_rendezvous().world_size
        # The host's store stays until both have met and closed (no exit barrier here).
        together.wait()
        node_handler.shutdown()
        together.wait()

    failed = both(node)
    assert not failed, failed
    assert met == {True: 2, False: 2}


def test_the_host_waits_for_a_node_that_never_comes_only_so_long() -> None:
    store = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False)
    assert not leave(store, nodes=2, wait_s=0.2)
    assert leave(store, nodes=2, wait_s=0.2)  # the second node out: at once
    assert not leave(store, nodes=5, wait_s=0.0)  # a node that is not the host never waits


def test_a_node_whose_host_is_gone_leaves_at_once() -> None:
    port = free_port()
    host = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=2))
    del host  # its server with it
    assert not leave(client, nodes=2, wait_s=30)


def test_a_torch_that_does_not_look_as_expected_keeps_its_own_exit(
    torch_internals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(api.SimpleElasticAgent, "_exit_barrier")
    shutdown = dr.DynamicRendezvousHandler.shutdown
    assert not install(host=True)
    assert dr.DynamicRendezvousHandler.shutdown is shutdown
