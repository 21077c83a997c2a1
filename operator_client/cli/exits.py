"""How commands end: exit codes and the error that carries one.

0 success, 1 the operation or the job failed, 2 bad input (job file, flags), 130 Ctrl-C.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class CommandError(Exception):
    """A command cannot go on; `code` is its exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
