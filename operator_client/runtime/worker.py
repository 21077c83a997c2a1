"""One torchrun worker: agree on the attempt and the resume point, fetch it
(start_point.py), build the trainer, fit, finalize (aggregate, summarize, _SUCCESS).

Forked by the agent that `kctl-train-runtime` runs (forked_main, with what
runtime/main.py preloaded), or started as `python -m operator_client.runtime.worker`, once per
process on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
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
from ..runstore import checkpoints, metrics, monitor, runinfo
from ..runstore.aggregate import aggregate_all
from ..runstore.outputs import RankOutputs
from ..spec.document import spec_hash
from ..spec.model import TrainingJob
from ..storage import ObjectStore, StoreError
from . import agent_clock, rehearsal
from .context import RuntimeConfigError, World, job_from_env, run_store, scratch_dir
from .event_log import EventLog
from .gpu_monitor import GpuMonitor, nvml_sampler
from .outputs import activate
from .start_point import ResumeSource, agree_start, fetch_resume, node_scratch
from .store_wait import await_store

log = logging.getLogger("kctl_train.runtime")


def build_trainer(
    job: TrainingJob,
    world: World,
    scratch: Path,
    callbacks: list[Any],
    backend: str,
    profiler: Any = None,
    loggers: list[Any] | None = None,
) -> Any:
    """The Lightning Trainer: DDP over the torchrun world, our callbacks, the user's
    trainer arguments, loggers and callbacks (after ours: the CSV log, which the report
    reads, stays `trainer.logger`); Lightning's own checkpointing and SIGTERM handling
    off; `profiler` (step_profiler.StepProfiler) times the loop."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.strategies import DDPStrategy

    from . import lightning_seams
    from .checkpoint_io import ShardedCheckpointIO

    train = job.spec.train
    assert train is not None  # command jobs never start this worker
    trainer = L.Trainer(
        accelerator="gpu" if backend == "nccl" else "cpu",
        devices=world.local_world_size,
        num_nodes=world.num_nodes,
        strategy=DDPStrategy(process_group_backend=backend, checkpoint_io=ShardedCheckpointIO()),
        logger=[CSVLogger(scratch, name="metrics", version="csv"), *(loggers or ())],
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=sys.stderr.isatty(),
        enable_model_summary=False,
        default_root_dir=scratch,
        profiler=profiler,
        **train.trainer,
    )
    lightning_seams.check(trainer)
    lightning_seams.without_signal_handlers(trainer)  # ours: runtime/agreement.py
    return trainer


def start_gpu_monitor(
    job: TrainingJob, world: World, store: ObjectStore, attempt: int
) -> GpuMonitor | None:
    """One sampler per node (local rank 0) and attempt, when monitoring is on and NVML
    answers."""
    interval = job.spec.monitoring.gpu_interval_seconds
    if world.local_rank != 0 or interval <= 0:
        return None
    sampler = nvml_sampler()
    if sampler is None:
        return None
    return GpuMonitor(sampler, store, world.node_rank, interval, attempt=attempt).start()


def finalize(
    trainer: Any,
    job: TrainingJob,
    store: ObjectStore,
    scratch: Path,
    attempt: int,
    metrics_log: Path | None,
) -> None:
    """Rank 0, after every rank finished: aggregate the outputs, summarize the GPUs,
    upload the metrics, then _SUCCESS (each commit fenced against a newer attempt)."""
    runinfo.fence(store, attempt)
    rows = aggregate_all(store, scratch / "aggregate")
    gpus = monitor.write_summary(store)
    if metrics_log is not None:
        store.put_file(metrics.KEY, metrics_log)
    runinfo.fence(store, attempt)
    runinfo.write_success(
        store,
        spec_hash(job),
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


def run(job: TrainingJob, world: World, events: EventLog) -> int:
    """The whole life of one worker; returns its exit code. Its goodput events go to
    `events` (runstore/events.py)."""
    import lightning as L
    import torch
    import torch.distributed as dist

    from .callbacks import PREEMPTED, CheckpointCallback, Preempted, RunAttempt
    from .plugins import (
        GoodputToLoggers,
        build_callbacks,
        build_loggers,
        import_object,
        upload_tensorboard,
    )
    from .run_callbacks import OutputsCallback, ProgressCallback, TrainerStatusCallback
    from .step_profiler import StepProfiler
    from .trainer_status import TrainerStatusReporter

    events.record("imports_done")

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        # Lightning's own handlers would print every line twice, without the rank prefix.
        logging.getLogger(name).handlers.clear()

    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    if gpu:
        torch.cuda.set_device(world.local_rank)
    events.record("rendezvous_start")
    if world.rank != 0:
        await_store(os.environ)
    dist.init_process_group(backend)
    # Control messages (attempt, resume point, output commits) on gloo, on CPU and GPU alike;
    # the checkpoint writers' (DCP's planning) on a gloo group of their own, from their thread.
    control = dist.new_group(backend="gloo")
    writing = dist.new_group(backend="gloo")
    events.record("rendezvous_end")
    store = run_store(job)
    scratch = scratch_dir(job, world)
    resume = node_scratch(scratch, world) / "resume"
    verified = checkpoints.Verified(store, scratch)
    source = ResumeSource(store, job)
    start = agree_start(job, world, store, source, resume, verified, control)
    events.bind(store, start.attempt)
    if start.manifest is not None:
        events.record("restore_start", step=start.step)
    ckpt_path = fetch_resume(start, source, world, resume, control, verified)
    if start.manifest is not None:
        size = sum(m.size for m in start.manifest.members)
        events.record("restore_end", step=start.step, bytes=size)
    history = None
    if world.rank == 0 and start.step and store.exists(metrics.KEY):
        history = scratch / "metrics-history.csv"
        store.get_file(metrics.KEY, history)

    train = job.spec.train
    assert train is not None  # command jobs never start this worker
    L.seed_everything(train.seed, workers=True, verbose=False)
    model = import_object(train.model, "spec.train.model")(**train.model_args)
    data = import_object(train.data, "spec.train.data")(**train.data_args) if train.data else None

    attempt = RunAttempt(store, start.attempt, world, control)
    outputs = RankOutputs(scratch / "outputs", world.rank)
    activate(outputs)
    writers = list(range(world.world_size)) if start.shared else [0]
    write, upload = rehearsal.save_delays(os.environ)
    saver = CheckpointCallback(
        job, attempt, scratch, start.step, history, verified, writers, writing, events,
        save_waits=(write.wait, upload.wait),
    )  # fmt: skip
    loggers = build_loggers(train.loggers or (), scratch, start.attempt)
    progress = ProgressCallback(world, start.step)
    callbacks = [
        progress,
        saver,
        OutputsCallback(attempt, outputs),
        *build_callbacks(train.callbacks or ()),
    ]
    if loggers:
        callbacks.append(GoodputToLoggers(loggers, events, store, world.rank, attempt.barrier))
    profiler = StepProfiler(events)
    reporter = TrainerStatusReporter.from_env(os.environ) if world.rank == 0 else None
    if reporter is not None:
        status = TrainerStatusCallback(reporter, progress, saver, events, profiler.close_window)
        callbacks.append(status)
    trainer = build_trainer(job, world, scratch, callbacks, backend, profiler, loggers)
    profiler.step = lambda: int(trainer.global_step)
    signal.signal(signal.SIGTERM, PREEMPTED.signal)
    gpu_monitor = start_gpu_monitor(job, world, store, start.attempt)
    try:
        trainer.fit(
            model,
            datamodule=data,
            ckpt_path=str(ckpt_path) if ckpt_path else None,
            weights_only=False,
        )
    except Preempted:
        profiler.close_window()
        if world.rank == 0:
            upload_tensorboard(store, scratch)
        events.record("exit", reason="preempted")
        log.warning("stopped by SIGTERM; exiting %d so the job is retried", EXIT_PREEMPTED)
        return EXIT_PREEMPTED
    except BaseException:
        # The steps since the last window: the account counts them (wasted, once the next
        # attempt resumes before them) instead of losing them in `recovery`.
        profiler.close_window()
        if world.rank == 0:
            with contextlib.suppress(Exception):  # the crash is what the job must say
                upload_tensorboard(store, scratch)
        raise
    finally:
        if gpu_monitor is not None:
            gpu_monitor.stop()
    profiler.close_window()
    saver.finish(trainer)
    dist.barrier(group=control)
    if world.rank == 0:
        upload_tensorboard(store, scratch)
        finalize(trainer, job, store, scratch, start.attempt, saver.metrics_file(trainer))
    dist.barrier(group=control)
    events.record("exit", reason="finished")
    dist.destroy_process_group()
    return 0


def configure_logging(rank: int) -> None:
    """Plain, rank-prefixed lines on stderr: readable in `kubectl logs` (replacing the
    agent's `[agent]` handler, which a worker forked from it inherits)."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s [rank {rank}] %(message)s",
        datefmt="%H:%M:%S",
        force=True,
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
    events = EventLog(int(rank) if rank.isdigit() else 0)
    # A worker forked by the agent's first round: the pod's time began with the agent.
    first_round = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    if first_round and "agent_rendezvous_start" in agent_clock.MARKS:
        # In the order they happened (the preload's end may come after the rendezvous').
        for event, at in sorted(agent_clock.MARKS.items(), key=lambda mark: mark[1]):
            events.record(event, at=at)
    # The pod's hostname: the account finds the pod's creation and scheduling by it.
    events.record("process_start", host=os.environ.get("HOSTNAME") or platform.node())
    try:
        world = World.from_env(os.environ)
        configure_logging(world.rank)
        return run(job_from_env(os.environ), world, events)
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
    finally:
        if not events.exited:
            events.record("exit", reason="failed")
        events.close()


def forked_main() -> int:
    """Entry point of a worker forked by the agent: its exit code is the process's (the
    agent reads a failure, and a preemption's 143, from it; a return value it ignores)."""
    # The agent's signal handlers (torchrun's, which raise its SignalException) come with
    # the fork: start from Python's own, as a new interpreter would; main() sets SIGTERM's.
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = main()
    if code:
        sys.exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
