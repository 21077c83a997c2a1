"""The pods of one replica type, whichever operator's object it is: a PyTorchJob's Master
or Worker, one replicated Job of a TrainJob's JobSet. Shared by workload.py (PyTorchJob)
and trainjob_pods.py (TrainJob)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class WorkloadError(ValueError):
    """The object cannot be turned into pods here (an unknown kind or runtime)."""


@dataclass(frozen=True)
class Group:
    """The pods of one replica type."""

    type: str  # PyTorchJob: Master or Worker; TrainJob: the replicated Job's name
    count: int
    template: Mapping[str, Any]  # the pod template: metadata and spec
    restart_policy: str
    backoff_limit: int | None  # the Job's own (TrainJob); a PyTorchJob's is in runPolicy
    container: str  # the container a local run starts (its main one)
    # TrainJob: the replicated Jobs that must reach a status first (JobSet's dependsOn),
    # as (name, "Complete" or "Ready").
    depends_on: tuple[tuple[str, str], ...] = ()
    # TrainJob: the Job's ancestor step (trainer, dataset-initializer, model-initializer).
    step: str | None = None
    # TrainJob: the trainer's Job under a torch policy: PET_NPROC_PER_NODE's value.
    torch_nproc: str | None = None
    # TrainJob: the containers (or init containers) of these pods the torch plugin writes
    # its variables into: the trainer's, and the runtime's envInjection targets.
    torch_targets: tuple[str, ...] = ()
