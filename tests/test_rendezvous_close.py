"""How the agents of a run that succeeded leave its rendezvous (runtime/rendezvous_close.py),
on torch's real c10d rendezvous and exit barrier: two nodes, the host's TCPStore."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import api
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from operator_client.backends.local.pods.process import free_port
from operator_client.runtime.rendezvous_close import install, leave


@pytest.fixture
def torch_internals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's exit barrier and the rendezvous' shutdown as they were, after the test."""
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
    port, failed = free_port(), []
    other_out = threading.Event()
    host_saw: list[bool] = []

    def node(host: bool) -> None:
        try:
            install(host)  # as each pod's agent does, once per process
            handler = get_rendezvous_handler(
                RendezvousParameters(
                    backend="c10d", endpoint=f"127.0.0.1:{port}", run_id="close",
                    min_nodes=2, max_nodes=2, is_host=str(host).lower(), join_timeout="60",
                )
            )  # fmt: skip
            info = handler.next_rendezvous()
            agent = SimpleNamespace(
                _store=info.store, _exit_barrier_timeout=30, _in_exit_barrier=False,
                _worker_group=SimpleNamespace(group_world_size=2, state="SUCCEEDED"),
            )  # fmt: skip
            if not host:
                time.sleep(0.3)  # the slower node's workers finish later
            api.SimpleElasticAgent._exit_barrier(agent)
            if not host:
                time.sleep(0.5)  # and it is slower to close
            handler.shutdown()
            if host:
                host_saw.append(other_out.is_set())
            else:
                other_out.set()
        except Exception as exc:  # the assertion below names it
            failed.append(exc)

    threads = [threading.Thread(target=node, args=(host,)) for host in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failed, failed
    assert host_saw == [True]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, errors


def test_the_host_waits_for_a_node_that_never_comes_only_so_long() -> None:
    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
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
    assert not install(True)
    assert dr.DynamicRendezvousHandler.shutdown is shutdown
