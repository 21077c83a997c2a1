"""A fault-injecting TCP proxy on loopback, in front of an S3 server (moto) — a test
fixture, used by the tests and by bench/faults.py.

Modes (switchable while clients are connected; open connections follow the switch):
- "pass": forward both ways;
- "503": answer every request with `503 Slow Down` and close;
- "reset": close every connection with a TCP reset;
- "blackhole": accept and read, never answer.
`reset_fraction` resets that share of connections in pass mode after the first bytes
of the server's answer (a response body that breaks off).
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "503", "reset", "blackhole"]

SLOW_DOWN = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
    b"Content-Length: 103\r\n\r\n"
    b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Reduce your rate</Message>"
    b"</Error>"
)


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN (SO_LINGER 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        host, _, port = upstream.removeprefix("http://").rstrip("/").partition(":")
        self.upstream = (host, int(port))
        self.mode: Mode = "pass"
        self.reset_fraction = 0.0
        self.connections = self.resets = 0
        self._random = random.Random(seed)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        self._server.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.mode != "pass":
            self._fault(client)
            return
        cut = self._random.random() < self.reset_fraction
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        self._pipe(client, upstream, cut)

    def _fault(self, client: socket.socket) -> None:
        mode = self.mode
        try:
            if mode == "reset":
                self.resets += 1
                _reset(client)
            elif mode == "503":
                client.settimeout(0.2)
                with contextlib.suppress(OSError):
                    client.recv(1 << 16)
                client.sendall(SLOW_DOWN)
                client.close()
            else:  # blackhole: read and hold until the mode changes or the client gives up
                while self.mode == "blackhole" and not self._stopped.is_set():
                    ready, _, _ = select.select([client], [], [], 0.2)
                    if ready and not client.recv(1 << 16):
                        break
                _reset(client)
        except OSError:
            client.close()

    def _pipe(self, client: socket.socket, upstream: socket.socket, cut: bool) -> None:
        peers = {client: upstream, upstream: client}
        try:
            while not self._stopped.is_set():
                if self.mode != "pass":
                    upstream.close()
                    self._fault(client)
                    return
                ready, _, _ = select.select(list(peers), [], [], 0.1)
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if cut and sock is upstream:
                        # Part of the answer, then a reset: a body that breaks off.
                        client.sendall(data[: max(1, len(data) // 2)])
                        self.resets += 1
                        _reset(client)
                        return
                    peers[sock].sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
