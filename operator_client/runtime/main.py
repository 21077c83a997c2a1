"""`kctl-train-runtime`: the trainer image's entrypoint, PID 1 of every replica pod.

Discovers the rank environment the operator injected, then runs torchrun's elastic agent
in-process with the computed options; the agent starts the workers (the Lightning fit, or
the user's command) and restarts them in place up to maxRestarts times.
"""

from __future__ import annotations

import getpass
import logging
import os
import signal
import sys
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

from ..contract import EXIT_PREEMPTED
from ..spec.document import nproc_per_node
from .context import RuntimeConfigError, job_from_env
from .rankenv import Defaults, InWorker, LaunchPlan, RankEnvError, discover

if TYPE_CHECKING:
    from ..spec.model import TrainingJob

log = logging.getLogger("kctl_train.runtime")
WORKER_MODULE = "operator_client.runtime.worker"


def gpu_count() -> int:
    import torch

    count: int = torch.cuda.device_count()
    return count


def torchrun_argv(plan: LaunchPlan, command: Sequence[str] | None) -> list[str]:
    """torchrun's full argument list: the plan's options, then the entry point."""
    entry = ["--no-python", *command] if command else ["-m", WORKER_MODULE]
    return [*plan.torchrun_args(), *entry]


def name_the_user(env: MutableMapping[str, str]) -> None:
    """A pod's uid may have no passwd entry (10001 in a minimal image, an arbitrary uid on
    OpenShift), and getpass.getuser() then raises: torch's compile caches and other
    libraries ask it. Name the user after the uid, for this process and the workers."""
    try:
        getpass.getuser()
    except (KeyError, OSError):
        env["USER"] = f"uid-{os.getuid()}"


def already_finished(job: TrainingJob) -> bool:
    """Whether a run of this very spec already finished (its _SUCCESS names the spec):
    then there is nothing to train, and a replica restarted after its peers exited (a
    Master killed in the job's last moments) must not wait for them at the rendezvous."""
    from ..runstore import runinfo
    from ..spec.document import spec_hash
    from .context import run_store

    done = runinfo.finished(run_store(job), spec_hash(job))
    if done is not None:
        log.info(
            "this spec already finished at step %d (attempt %d): nothing to run; to train "
            "more, change the spec (more steps) or give the run another store",
            done.step,
            done.attempt,
        )
    return done is not None


def main(argv: Sequence[str] | None = None) -> int:
    """The runtime (started by the `kctl-train-runtime` console script, entry.py)."""
    name_the_user(os.environ)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s [agent] %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        job = job_from_env(os.environ)
        plan = discover(
            os.environ,
            gpu_count(),
            Defaults(
                job_id=job.metadata.name,
                max_restarts=job.spec.fault.max_restarts,
                nproc=nproc_per_node(job),
            ),
        )
    except (RuntimeConfigError, RankEnvError) as exc:
        print(f"kctl-train-runtime: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(plan, InWorker):
        from .worker import main as worker_main

        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a worker is not PID 1: its own rules

        return worker_main()
    if already_finished(job):
        return 0
    # In-place restarts are unreliable when workers share the rendezvous store
    # (docs/RUNTIME_NOTES.md).
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # The workers' lines reach the log as they are printed (progress, failures): the
    # training-operator sets this, Trainer v2 does not (the image's ENV does; a local
    # run from this machine's Python has no image).
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # On SIGTERM the agent forwards it to the workers, then SIGKILLs them after this many
    # seconds (torch's default: 30): give the emergency checkpoint the pod's whole grace
    # period, less a little for the agent's own exit.
    grace = job.spec.save_window_seconds
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(max(grace - 3, 1)))
    args = torchrun_argv(plan, job.spec.command)
    log.info("%s: %s", plan.source, " ".join(args))

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    try:
        run(get_args_parser().parse_args(args))
    except SignalException as exc:
        log.warning("agent stopped by signal %s", exc.sigval)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        codes = {f.exitcode for f in exc.failures.values()}
        log.error(
            "workers failed: %s",
            ", ".join(f"rank {r}: exit {f.exitcode}" for r, f in sorted(exc.failures.items())),
        )
        return EXIT_PREEMPTED if EXIT_PREEMPTED in codes else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
