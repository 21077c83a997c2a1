"""The Python API: `Client` (client.py), `JobText` (a job as text, named), the handle it
returns for a job, and the shapes every backend shows a job in (backends/types.py), for
callers to type against.

Only `Client` and `JobText` are imported with the package: the rest is imported on first
use (PEP 562), so that render, validate and schema, which need no backend, do not pay for
one."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .client import Client
from .jobs import JobText

if TYPE_CHECKING:
    from ..backends.types import (
        Condition,
        ConditionReached,
        Event,
        Finding,
        JobChanged,
        JobView,
        LogLine,
        ProgressReport,
        Replica,
        ReplicaNote,
        Submitted,
    )
    from ..collect.results import Collected
    from .failure import FailureReport
    from .handle import JobHandle

__all__ = [
    "Client",
    "Collected",
    "Condition",
    "ConditionReached",
    "Event",
    "FailureReport",
    "Finding",
    "JobChanged",
    "JobHandle",
    "JobText",
    "JobView",
    "LogLine",
    "ProgressReport",
    "Replica",
    "ReplicaNote",
    "Submitted",
]

# Where each name of __all__ comes from (relative to this package), but for the two
# imported above: the shapes of backends/types.py, but for the three named after.
_LAZY = {
    **dict.fromkeys((n for n in __all__ if n not in ("Client", "JobText")), "..backends.types"),
    "Collected": "..collect.results",
    "FailureReport": ".failure",
    "JobHandle": ".handle",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
