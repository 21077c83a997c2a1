"""An object store on this machine's loopback (MinIO, moto on 127.0.0.1:9000), shown on the
same address inside each pod's network namespace: the supervisor holds a listening
socket in every namespace and forwards each connection to the host's loopback.

A pod on a cluster reaches its store over the network; a store that only this machine's
loopback can reach would otherwise be unreachable from the sandboxes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from . import linux


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


class LoopbackRelay:
    """Relays 127.0.0.1:`port` inside each of `namespaces` to 127.0.0.1:`port` here."""

    def __init__(self, port: int, namespaces: list[Path]) -> None:
        self.port = port
        self._servers = {ns: self._listen_in(ns) for ns in namespaces}
        self._stopped = threading.Event()
        self._cut: set[Path] = set()
        self._open: dict[Path, set[socket.socket]] = {ns: set() for ns in namespaces}
        self._lock = threading.Lock()
        for ns, server in self._servers.items():
            threading.Thread(target=self._accept, args=(ns, server), daemon=True).start()

    def partition(self, netns: Path, cut: bool) -> None:
        """Cut (or restore) one namespace's way to the store, as its link going down
        would: open connections are reset, new ones refused."""
        with self._lock:
            if not cut:
                self._cut.discard(netns)
                return
            self._cut.add(netns)
            for sock in self._open[netns]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _listen_in(self, netns: Path) -> socket.socket:
        """A listening socket created inside `netns`: setns moves only the calling thread,
        so a helper thread does it and the socket stays in that namespace."""
        made: list[socket.socket | BaseException] = []

        def listen() -> None:
            try:
                linux.setns(netns, linux.CLONE_NEWNET)
                made.append(socket.create_server(("127.0.0.1", self.port), backlog=64))
            except BaseException as exc:
                made.append(exc)

        thread = threading.Thread(target=listen)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        made[0].settimeout(0.5)
        return made[0]

    def _accept(self, netns: Path, server: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._forward, args=(netns, client), daemon=True).start()

    def _forward(self, netns: Path, client: socket.socket) -> None:
        client.settimeout(None)
        try:
            if netns in self._cut:
                raise ConnectionRefusedError
            upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open[netns] |= {client, upstream}
        threads = [
            threading.Thread(target=_pipe, args=pair, daemon=True)
            for pair in ((client, upstream), (upstream, client))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with self._lock:
            self._open[netns] -= {client, upstream}
        client.close()
        upstream.close()

    def close(self) -> None:
        self._stopped.set()
        for server in self._servers.values():
            server.close()


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
