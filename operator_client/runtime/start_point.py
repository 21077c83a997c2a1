"""Where an attempt starts, agreed by every rank before training: rank 0 claims the
attempt, writes run.json and chooses the checkpoint (the run's own newest, or the one
checkpoint.resume names: runstore/resume_line.py); each node fetches and verifies it once."""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import checkpoint_name
from ..runstore import checkpoints, resume_line, runinfo
from ..spec.document import spec_document, spec_hash
from ..spec.model import TrainingJob
from ..storage import ObjectStore, open_store
from ..version import __version__
from .context import RuntimeConfigError, World

log = logging.getLogger("kctl_train.runtime")


@dataclass(frozen=True)
class ResumeSource:
    """Where an attempt's checkpoint comes from: the run's own store, or the store of the
    checkpoint URI that `checkpoint.resume` names (runstore/resume_line.py decides)."""

    store: ObjectStore
    job: TrainingJob

    def choose(
        self, dest: Path, verified: checkpoints.Verified, attempt: int
    ) -> tuple[checkpoints.Manifest | None, str | None]:
        """Rank 0: the checkpoint every rank starts from (None: fresh) and the URI it is
        read from (None: the run's store); records the line this attempt begins."""
        resume = self.job.spec.checkpoint.resume
        try:
            plan = resume_line.plan_for(self.job, self.store)
        except resume_line.ResumeChoiceError as exc:
            raise RuntimeConfigError(f"spec.checkpoint.resume: {exc}") from None
        chosen, uri = None, None
        for manifest in plan.candidates:
            name = manifest.key.rsplit("/", 1)[-1]
            if checkpoints.fetch(self.store, manifest, dest / name, verified=verified):
                chosen = manifest
                break
            log.warning("checkpoint %s does not verify: not resumed from", manifest.key)
        if chosen is None and plan.from_uri:
            uri = plan.from_uri
            chosen = checkpoints.Manifest.from_json(
                self._uri_store(uri).get_bytes(checkpoints.MANIFEST)
            )
        if chosen is None and plan.required:
            steps = ", ".join(str(m.step) for m in plan.candidates)
            raise RuntimeConfigError(
                f"spec.checkpoint.resume: {resume}: the checkpoint to start from "
                f"(step {steps}) does not verify; give resume: auto to take the newest "
                "that does"
            )
        line = plan.line(spec_hash(self.job), attempt, chosen)
        if line is not None:
            resume_line.write(self.store, line)
            log.info(
                "attempt %d begins the run's line from %s (checkpoint.resume: %s); its "
                "restarts continue from the newest checkpoint of the line",
                attempt, f"step {chosen.step}" if chosen else "a fresh start", line.choice,
            )  # fmt: skip
        return chosen, uri

    def fetch(
        self,
        manifest: checkpoints.Manifest,
        uri: str | None,
        dest: Path,
        verified: checkpoints.Verified,
    ) -> Path | None:
        """The checkpoint's files, verified, under dest (None: they do not verify); not
        again where choose() fetched them."""
        if uri is not None:
            return checkpoints.fetch(self._uri_store(uri), manifest, dest, "", verified)
        return checkpoints.fetch(self.store, manifest, dest, None, verified)

    def _uri_store(self, uri: str) -> ObjectStore:
        storage = self.job.spec.storage
        return open_store(
            uri.rstrip("/") + "/",
            endpoint=storage.endpoint if storage else None,
            region=storage.region if storage else None,
        )


@dataclass(frozen=True)
class StartPoint:
    """What every rank agreed on before training: the attempt, the checkpoint, and whether
    every rank sees what the others write to the store (then every rank writes a share of
    each checkpoint; otherwise, a file:// store in each pod's own volume, rank 0 alone)."""

    attempt: int
    manifest: checkpoints.Manifest | None
    shared: bool = True
    uri: str | None = None  # the checkpoint URI it is read from (None: the run's store)

    @property
    def step(self) -> int:
        return self.manifest.step if self.manifest else 0


def versions() -> dict[str, str]:
    """Versions that decide whether a run can be reproduced."""
    import lightning
    import torch

    return {
        "kctl-train": __version__,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
    }


def agree_start(
    job: TrainingJob,
    world: World,
    store: ObjectStore,
    source: ResumeSource,
    scratch: Path,
    verified: checkpoints.Verified,
    control: Any,
) -> StartPoint:
    """Rank 0 claims the attempt, writes run.json and chooses the checkpoint; every rank
    receives the same answer (a broadcast on the control group)."""
    import torch
    import torch.distributed as dist

    choice: list[Any] = [None, None, None]
    if world.rank == 0:
        attempt = runinfo.claim_attempt(
            store, {"worldSize": world.world_size, "nodes": world.num_nodes}
        )
        runinfo.write_run_json(
            store,
            spec_document(job),
            spec_hash(job),
            {
                "worldSize": world.world_size,
                "nodes": world.num_nodes,
                "processesPerNode": world.local_world_size,
            },
            attempt,
            versions(),
        )
        chosen, uri = source.choose(scratch, verified, attempt)
        choice = [attempt, chosen.to_json().decode() if chosen else None, uri]
    dist.broadcast_object_list(choice, src=0, group=control)
    attempt, manifest_json, uri = choice
    manifest = checkpoints.Manifest.from_json(manifest_json.encode()) if manifest_json else None
    # Rank 0's claim is in the store: whoever cannot see it does not share rank 0's store.
    sees = torch.tensor([float(store.exists(runinfo.attempt_key(attempt)))])
    dist.all_reduce(sees, op=dist.ReduceOp.MIN, group=control)
    return StartPoint(attempt, manifest, shared=bool(sees.item()), uri=uri)


def node_scratch(scratch: Path, world: World) -> Path:
    """A directory the ranks of one node share (beside each rank's own scratch)."""
    return scratch.parent / f"node-{world.node_rank:05d}"


def fetch_resume(
    start: StartPoint,
    source: ResumeSource,
    world: World,
    resume: Path,
    control: Any,
    verified: checkpoints.Verified,
) -> Path | None:
    """The agreed checkpoint, fetched and verified once per node into `resume` (local
    rank 0 downloads, the node's other ranks wait), for every rank to read (None: a fresh
    start). Collective."""
    import torch
    import torch.distributed as dist

    if start.manifest is None:
        if world.rank == 0:
            log.info("attempt %d: no committed checkpoint, starting fresh", start.attempt)
        return None
    manifest = start.manifest
    dest = resume / checkpoint_name(manifest.step)
    path = source.fetch(manifest, start.uri, dest, verified) if world.local_rank == 0 else None
    failed = torch.tensor([float(world.local_rank == 0 and path is None)])
    dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=control)
    if failed.item():
        raise RuntimeConfigError(f"checkpoint {manifest.key} failed verification on a node")
    if world.rank == 0:
        log.info(
            "attempt %d: resuming from %s (step %d, saved by a world of %d)",
            start.attempt,
            manifest.key,
            manifest.step,
            manifest.world_size,
        )
    return dest if manifest.format == checkpoints.DCP else dest / checkpoints.MODEL_FILE
