"""One torchrun worker: agree on the attempt and the resume point, fit, publish, aggregate.

Started by the agent that `kctl-train-runtime` launches (`python -m
operator_client.runtime.worker`), once per process on every node.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ..contract import (
    EXIT_IO_ERROR,
    EXIT_PREEMPTED,
    EXIT_SUPERSEDED,
    TERMINATION_LOG,
    TERMINATION_LOG_ENV,
)
from ..render.pytorchjob import spec_document, spec_hash
from ..spec.model import TrainingJob
from ..storage import ObjectStore, StoreError, open_store
from . import checkpoints, metrics, monitor, runinfo
from .aggregate import aggregate_all
from .context import RuntimeConfigError, World, job_from_env, scratch_dir, store_for
from .outputs import RankOutputs, activate

log = logging.getLogger("kctl_train.runtime")


def import_object(path: str, field: str) -> Any:
    """`package.module:Name` -> the object, with an error naming the spec field."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeConfigError(
            f"{field}: cannot import {module_name!r} ({exc}); is the "
            "package installed in the image?"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise RuntimeConfigError(f"{field}: {module_name!r} has no {attr!r}") from None


def _resume_source(job: TrainingJob, store: ObjectStore) -> tuple[ObjectStore, str] | None:
    """Where the checkpoint to resume from lives: the run's own store (auto), the store
    of an explicit checkpoint URI, or nowhere (never). With the checkpoint's directory key
    in it (None: chosen among the run's committed checkpoints)."""
    resume = job.spec.checkpoint.resume
    if resume == "never":
        return None
    if resume == "auto":
        return store, ""
    storage = job.spec.storage
    return open_store(
        resume.rstrip("/") + "/",
        endpoint=storage.endpoint if storage else None,
        region=storage.region if storage else None,
    ), resume


def _choose_checkpoint(
    job: TrainingJob, store: ObjectStore, dest: Path, verified: checkpoints.Verified
) -> checkpoints.Manifest | None:
    """Rank 0: the checkpoint every rank resumes from, or None for a fresh start."""
    source = _resume_source(job, store)
    if source is None:
        return None
    if not source[1]:
        found = checkpoints.newest_verified(store, dest, verified)
        return found[0] if found else None
    return checkpoints.Manifest.from_json(source[0].get_bytes(checkpoints.MANIFEST))


def run(job: TrainingJob, world: World) -> int:
    """The whole life of one worker; returns its exit code."""
    import lightning as L
    import torch
    import torch.distributed as dist
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.strategies import DDPStrategy

    from .callbacks import PREEMPTED, Preempted, RuntimeCallback

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        # Lightning's own handlers would print every line twice, without the rank prefix.
        logging.getLogger(name).handlers.clear()

    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    if gpu:
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group(backend)
    # Control messages (attempt, resume point, output commits) on gloo, on CPU and GPU alike.
    control = dist.new_group(backend="gloo")
    store = store_for(job)
    scratch = scratch_dir(job, world)
    resume_dir = scratch / "resume"
    verified = checkpoints.Verified(store, scratch)

    choice: list[Any] = [None, None]
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
        )
        chosen = _choose_checkpoint(job, store, resume_dir, verified)
        choice = [attempt, chosen.to_json().decode() if chosen else None]
    dist.broadcast_object_list(choice, src=0, group=control)
    attempt, manifest_json = choice
    ckpt_path = None
    resumed_step = 0
    if manifest_json is not None:
        manifest = checkpoints.Manifest.from_json(manifest_json.encode())
        source = _resume_source(job, store)
        assert source is not None
        # An explicit URI is the checkpoint's own directory; auto reads from the run root.
        ckpt_path = checkpoints.fetch(
            source[0],
            manifest,
            resume_dir / f"step-{manifest.step:012d}",
            "" if source[1] else None,
        )
        if ckpt_path is None:
            raise RuntimeConfigError(
                f"checkpoint {manifest.key} failed verification on rank {world.rank}"
            )
        resumed_step = manifest.step
        if world.rank == 0:
            log.info(
                "attempt %d: resuming from %s (step %d, saved by a world of %d)",
                attempt,
                manifest.key,
                manifest.step,
                manifest.world_size,
            )
    elif world.rank == 0:
        log.info("attempt %d: no committed checkpoint, starting fresh", attempt)
    history = None
    if world.rank == 0 and resumed_step and store.exists(metrics.KEY):
        history = scratch / "metrics-history.csv"
        store.get_file(metrics.KEY, history)

    train = job.spec.train
    assert train is not None  # command jobs never start this worker
    L.seed_everything(train.seed, workers=True, verbose=False)
    model = import_object(train.model, "spec.train.model")(**train.model_args)
    data = import_object(train.data, "spec.train.data")(**train.data_args) if train.data else None

    outputs = RankOutputs(scratch / "outputs", world.rank)
    activate(outputs)
    callback = RuntimeCallback(
        job, world, store, scratch, outputs, attempt, resumed_step, control, history, verified
    )
    gpu_monitor = None
    if world.local_rank == 0 and job.spec.monitoring.gpu_interval_seconds > 0:
        sampler = monitor.nvml_sampler()
        if sampler is not None:
            gpu_monitor = monitor.GpuMonitor(
                sampler, store, world.node_rank, job.spec.monitoring.gpu_interval_seconds
            ).start()
    trainer = L.Trainer(
        accelerator="gpu" if gpu else "cpu",
        devices=world.local_world_size,
        num_nodes=world.num_nodes,
        strategy=DDPStrategy(process_group_backend=backend),
        logger=CSVLogger(scratch, name="metrics", version="csv"),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=sys.stderr.isatty(),
        enable_model_summary=False,
        default_root_dir=scratch,
        **train.trainer,
    )
    # Lightning's SIGTERM handler broadcasts from inside the signal handler, which breaks
    # gloo when ranks are signalled mid-collective; ours only sets a flag that the ranks
    # agree on at a batch boundary (callbacks.AGREE_EVERY).
    trainer._signal_connector.register_signal_handlers = lambda: None
    signal.signal(signal.SIGTERM, lambda signum, frame: PREEMPTED.set())
    try:
        trainer.fit(
            model,
            datamodule=data,
            ckpt_path=str(ckpt_path) if ckpt_path else None,
            weights_only=False,
        )
    except Preempted:
        log.warning("stopped by SIGTERM; exiting %d so the job is retried", EXIT_PREEMPTED)
        return EXIT_PREEMPTED
    finally:
        if gpu_monitor is not None:
            gpu_monitor.stop()
    callback.finish(trainer)
    dist.barrier(group=control)
    if world.rank == 0:
        runinfo.fence(store, attempt)
        rows = aggregate_all(store, scratch / "aggregate")
        gpus = monitor.write_summary(store)
        metrics_log = callback.metrics_file(trainer)
        if metrics_log is not None:
            store.put_file(metrics.KEY, metrics_log)
        runinfo.fence(store, attempt)
        runinfo.write_success(
            store,
            {
                "step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "attempt": attempt,
                "outputRows": rows,
                "gpusMonitored": gpus,
                "checkpoint": checkpoints.checkpoint_key(trainer.global_step),
            },
        )
        log.info("finished at step %d; outputs %s", trainer.global_step, rows)
    dist.barrier(group=control)
    dist.destroy_process_group()
    return 0


def configure_logging(rank: int) -> None:
    """Plain, rank-prefixed lines on stderr: readable in `kubectl logs`."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s [rank {rank}] %(message)s",
        datefmt="%H:%M:%S",
    )


def terminate_with(message: str) -> None:
    """Say why this container fails where Kubernetes looks (terminationMessagePath; the
    kubelet shows it as the container's terminated.message), and on stderr."""
    print(f"kctl-train-runtime: error: {message}", file=sys.stderr, flush=True)
    path = os.environ.get(TERMINATION_LOG_ENV) or TERMINATION_LOG
    try:
        with open(path, "w") as fh:  # the kubelet creates it; locally the backend names it
            fh.write(message + "\n")
    except OSError:
        pass


def main() -> int:
    """Entry point of each torchrun worker process."""
    rank = os.environ.get("RANK", "?")
    try:
        world = World.from_env(os.environ)
        configure_logging(world.rank)
        return run(job_from_env(os.environ), world)
    except RuntimeConfigError as exc:
        terminate_with(str(exc))
        return 2
    except runinfo.Superseded as exc:
        terminate_with(f"rank {rank}: {exc}")
        return EXIT_SUPERSEDED
    except (OSError, StoreError) as exc:
        # A full disk, a store that refuses writes: the cause, not only an exit code.
        terminate_with(f"rank {rank}: cannot write or read data: {exc}")
        return EXIT_IO_ERROR
    except Exception as exc:
        terminate_with(f"rank {rank}: {type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    sys.exit(main())
