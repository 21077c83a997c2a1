"""The TrainingJob spec: typed model, YAML loading with positions, JSON schema.

The names below are imported on first use: pydantic and the model cost ~0.3 s, which the
commands that only look at jobs (status, list, logs) never pay.
"""

from typing import TYPE_CHECKING, Any

from .issues import SpecIssue

if TYPE_CHECKING:
    from .loader import LoadedJob, SpecError, load_job, load_job_text
    from .model import NodeRange, TrainingJob

_LAZY = {
    "LoadedJob": "loader",
    "SpecError": "loader",
    "load_job": "loader",
    "load_job_text": "loader",
    "NodeRange": "model",
    "TrainingJob": "model",
}

__all__ = [
    "LoadedJob",
    "NodeRange",
    "SpecError",
    "SpecIssue",
    "TrainingJob",
    "load_job",
    "load_job_text",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
