"""How commands end: 0 success, 1 the operation or the job failed, 2 bad input (job
file, flags), 130 Ctrl-C. Errors carry their own code (errors.KctlTrainError)."""

from __future__ import annotations

from ..errors import EXIT_BAD_INPUT, EXIT_FAILED

EXIT_OK, EXIT_INTERRUPTED = 0, 130

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK"]
