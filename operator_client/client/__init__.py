"""The Python API: `Client` (client.py), the handle it returns for a job, and the
shapes every backend shows a job in (backends/types.py), for callers to type against."""

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
from .client import Client
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
    "JobView",
    "LogLine",
    "ProgressReport",
    "Replica",
    "ReplicaNote",
    "Submitted",
]
