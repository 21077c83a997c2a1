"""The error a cluster call ends with (kept apart from the backend, so that catching it
never imports the kubernetes client)."""

from __future__ import annotations


class ClusterError(Exception):
    """A cluster call failed; the message says what and what to do. `code` is the HTTP
    status (0: no answer)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code
