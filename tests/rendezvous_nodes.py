"""Two nodes of torch's real c10d rendezvous, as threads of the test: for the tests of what
the runtime changes in torch's rendezvous (its pace, how an agent leaves it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler


def handler(port: int, run_id: str, host: bool, **config: str) -> Any:
    """A c10d rendezvous handler of 2 nodes at 127.0.0.1:`port` (`host`: it opens the store)."""
    return get_rendezvous_handler(
        RendezvousParameters(
            backend="c10d", endpoint=f"127.0.0.1:{port}", run_id=run_id, min_nodes=2,
            max_nodes=2, is_host=str(host).lower(), **{"join_timeout": "60", **config},
        )
    )  # fmt: skip


def both(node: Callable[[bool], None]) -> list[Exception]:
    """Run node(host) for the host and for the other node at once; what they raised."""
    failed: list[Exception] = []

    def run(host: bool) -> None:
        try:
            node(host)
        except Exception as exc:  # the caller's assertion names it
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(host,)) for host in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return failed
