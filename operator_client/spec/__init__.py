"""The TrainingJob spec: typed model, YAML loading with positions, JSON schema."""

from .loader import LoadedJob, SpecError, SpecIssue, load_job, load_job_text
from .model import NodeRange, TrainingJob

__all__ = [
    "LoadedJob",
    "NodeRange",
    "SpecError",
    "SpecIssue",
    "TrainingJob",
    "load_job",
    "load_job_text",
]
