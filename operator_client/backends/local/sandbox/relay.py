"""An object store on this machine's loopback (MinIO, moto on 127.0.0.1:9000), shown on the
same address inside a pod's network namespace: a process the pod's shim starts holds a
listening socket in the pod's namespace and forwards each connection to this machine's
loopback.

A pod on a cluster reaches its store over the network; a store that only this machine's
loopback can reach would otherwise be unreachable from the sandboxes. The relay lives as
long as the pod's shim, so the store stays reachable while no supervisor runs (one that
was killed, until `apply` starts another that takes the pods over).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from . import linux

# How often an open connection's pod is checked for a partition (`kctl-train chaos`).
CUT_POLL_SECONDS = 0.1


def loopback_port(endpoint: str | None) -> int | None:
    """The port of an http(s) endpoint on loopback (None: not on loopback)."""
    if not endpoint:
        return None
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    try:
        on_loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        on_loopback = False
    if not on_loopback:
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


class PodRelay:
    """Relays connections to `server` (listening on 127.0.0.1:`port` of the pod's
    namespace) to 127.0.0.1:`port` of the namespace `upstream` (a descriptor of this
    machine's, opened before joining the pod's). While the file `cut` exists the pod is
    cut off, as its link going down would cut it: open connections are reset, new ones
    refused (the supervisor writes it for a partition, and removes it to heal)."""

    def __init__(self, server: socket.socket, upstream: int, cut: Path) -> None:
        self.server, self.upstream, self.cut = server, upstream, cut
        self.port = server.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Serve until the server socket is closed (or the process ends)."""
        threading.Thread(target=self._watch, daemon=True).start()
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _watch(self) -> None:
        """Reset the open connections of a pod that is cut off."""
        while True:
            if self.cut.exists():
                with self._lock:
                    for sock in self._open:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
            time.sleep(CUT_POLL_SECONDS)

    def _forward(self, client: socket.socket) -> None:
        try:
            if self.cut.exists():
                raise ConnectionRefusedError
            # This thread only: its connection is made on this machine's loopback.
            linux.setns(self.upstream, linux.CLONE_NEWNET)
            upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open |= {client, upstream}
        pipes = [
            threading.Thread(target=_pipe, args=pair, daemon=True)
            for pair in ((client, upstream), (upstream, client))
        ]
        for thread in pipes:
            thread.start()
        for thread in pipes:
            thread.join()
        with self._lock:
            self._open -= {client, upstream}
        client.close()
        upstream.close()


def start(port: int, upstream: int, cut: Path) -> int:
    """Start a pod's relay in a process of its own, in the network namespace the caller
    has joined (the pod's), listening before this returns; its pid. It ends with the
    caller (the pod's shim), which starts it before the namespaces where a thread could
    not be made (a process that unshared its PID namespace cannot start threads)."""
    server = socket.create_server(("127.0.0.1", port), backlog=64)
    pid = os.fork()
    if pid == 0:
        try:
            linux.die_with_parent()
            PodRelay(server, upstream, cut).run()
        finally:
            os._exit(0)
    server.close()
    os.close(upstream)
    return pid


def this_network() -> int:
    """A descriptor of the calling thread's network namespace (for the relay's upstream)."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RD)
