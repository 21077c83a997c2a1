"""What one worker process knows about its run: spec, world, store, scratch."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..contract import SPEC_ENV
from ..runstore.location import store_for
from ..spec.model import TrainingJob
from ..storage import ObjectStore


class RuntimeConfigError(Exception):
    """The runtime was started without a usable spec or world; the message says what."""


def job_from_env(env: Mapping[str, str]) -> TrainingJob:
    """The TrainingJob the renderer carried in KCTL_TRAIN_SPEC."""
    from pydantic import ValidationError

    text = env.get(SPEC_ENV)
    if not text:
        raise RuntimeConfigError(
            f"{SPEC_ENV} is not set: kctl-train-runtime runs inside pods "
            "rendered by kctl-train (or `kctl-train apply --local`)"
        )
    try:
        return TrainingJob.model_validate_json(text)
    except ValidationError as exc:
        raise RuntimeConfigError(f"{SPEC_ENV} is not a valid TrainingJob: {exc}") from None


# A training run waits out store outages this long before a write fails the worker
# (and the job's restart policy takes over): GPU time is worth a patient retry.
STORE_PATIENCE = 180.0


def run_store(job: TrainingJob) -> ObjectStore:
    """The run's store as a worker uses it: patient with outages."""
    return store_for(job, patience=STORE_PATIENCE)


@dataclass(frozen=True)
class World:
    """The torchrun worker's place in the job."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    restart_count: int

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> World:
        try:
            return cls(
                int(env["RANK"]),
                int(env["LOCAL_RANK"]),
                int(env["WORLD_SIZE"]),
                int(env["LOCAL_WORLD_SIZE"]),
                int(env.get("GROUP_RANK", "0")),
                int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            )
        except (KeyError, ValueError) as exc:
            raise RuntimeConfigError(
                f"not inside a torchrun worker ({exc}): start "
                "kctl-train-runtime, which launches the workers"
            ) from None


def scratch_dir(job: TrainingJob, world: World, env: Mapping[str, str] = os.environ) -> Path:
    """Local working directory of one rank (checkpoint staging, per-rank files).

    Under /tmp (an emptyDir in the pod) so Lightning's save and our moves stay on one
    filesystem; per rank, so several ranks on one machine never share files."""
    base = Path(env.get("KCTL_TRAIN_SCRATCH") or tempfile.gettempdir())
    return (
        base
        / "kctl-train"
        / job.metadata.namespace
        / job.metadata.name
        / (f"rank-{world.rank:05d}")
    )
