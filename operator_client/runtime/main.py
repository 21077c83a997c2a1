"""`kctl-train-runtime`: the trainer image's entrypoint, PID 1 of every replica pod.

Discovers the rank environment the operator injected, then runs torchrun's elastic agent
in-process with the computed options; the agent starts the workers (the Lightning fit, or
the user's command) and restarts them in place up to maxRestarts times. Lightning workers
are forked from the agent, which imports torch and Lightning once per pod (preload_worker),
so a worker (re)started trains without importing them.
"""

from __future__ import annotations

import contextlib
import getpass
import importlib
import logging
import os
import signal
import sys
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

from ..contract import EXIT_PREEMPTED
from ..spec.document import nproc_per_node
from . import agent_clock, rendezvous_close
from .context import RuntimeConfigError, job_from_env
from .rankenv import Defaults, InWorker, LaunchPlan, RankEnvError, discover, inside_torchrun
from .rendezvous_pace import interval, pace
from .store_wait import await_port

if TYPE_CHECKING:
    from ..spec.model import TrainingJob

log = logging.getLogger("kctl_train.runtime")
WORKER_MODULE = "operator_client.runtime.worker"
# What a Lightning worker imports beyond the agent's torch before its first step: ~3 s of
# CPU on every start, paid once per pod by the agent the workers are forked from. (A
# forkserver would import torch a second time beside the agent's own: 2.3 s more CPU per
# pod, which is what a new pod's recovery waited for on a busy node.) A missing module is
# left to the worker to report.
WORKER_PRELOAD = ("lightning", WORKER_MODULE)


def gpu_count() -> int:
    import torch

    count: int = torch.cuda.device_count()
    return count


def torchrun_argv(plan: LaunchPlan, command: Sequence[str] | None) -> list[str]:
    """torchrun's full argument list: the plan's options, then the entry point (the
    Lightning worker is forked from the agent: launch())."""
    if command:
        return [*plan.torchrun_args(), "--no-python", *command]
    return [*plan.torchrun_args(), "--start-method=fork", "-m", WORKER_MODULE]


def agent_env(job: TrainingJob, env: MutableMapping[str, str]) -> None:
    """What the agent and every worker it starts run with (set before anything reads
    them: torch reads some at import, and the forked workers inherit the rest)."""
    # In-place restarts are unreliable when workers share the rendezvous store
    # (docs/RUNTIME_NOTES.md).
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # The workers' lines reach the log as they are printed (progress, failures): the
    # training-operator sets this, Trainer v2 does not (the image's ENV does; a local
    # run from this machine's Python has no image).
    env.setdefault("PYTHONUNBUFFERED", "1")
    # On SIGTERM the agent forwards it to the workers, then SIGKILLs them after this many
    # seconds (torch's default: 30): give the emergency checkpoint the pod's whole grace
    # period, less a little for the agent's own exit.
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(max(job.spec.save_window_seconds - 3, 1)))
    # CUDA must not be initialised in the agent (a forked child cannot use it then): asking
    # whether GPUs exist goes through NVML instead of the CUDA runtime.
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def preload_worker() -> None:
    """Import torch, then what a Lightning worker adds, before the agent reads the store
    and joins its rendezvous: the workers it forks find them imported. Not in a thread
    beside those: two threads importing at once can deadlock on a package and its
    submodule (CPython raises _DeadlockError in one; in bench/faults.py the store's boto3
    and Lightning both imported `html`, and the pod hung on its way out). A module that is
    missing is left to the worker, which says what to install."""
    for module in ("torch", *WORKER_PRELOAD):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    agent_clock.mark("agent_preloaded")


class _ExitWithoutTraceback(logging.Filter):
    """torchrun logs a forked worker's non-zero exit (a preemption's 143 included) with
    the traceback of its own wait for it, which says nothing the line does not: the
    worker's own error, if any, is in the worker's lines above it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("failed (exitcode"):
            record.exc_info, record.exc_text = None, None
        return True


def launch(args: list[str], lightning: bool) -> None:
    """Run torchrun's elastic agent until the workers finish (its errors propagate): the
    user's command as torchrun runs it, the Lightning worker as a function the agent's
    forks run (torchrun's `-m` would start a new interpreter each time)."""
    from torch.distributed.run import config_from_args, get_args_parser, run

    parsed = get_args_parser().parse_args(args)
    if not lightning:
        run(parsed)
        return
    from torch.distributed.launcher.api import elastic_launch

    from .worker import forked_main

    config, _, _ = config_from_args(parsed)
    elastic_launch(config, entrypoint=forked_main)()


def set_up_agent(args: list[str]) -> float:
    """What the agent's every launch runs with, set once per process: torchrun's
    rendezvous pace (returned: the seconds between its reads of the store), the host
    keeping its store until every node has left a run that succeeded, and its lines
    about a forked worker's exit without a traceback."""
    from torch.distributed.run import get_args_parser, parse_min_max_nnodes

    parsed = get_args_parser().parse_args(args)
    nodes = parse_min_max_nnodes(parsed.nnodes)[1]
    pace(nodes)
    rendezvous_close.install(host="is_host=true" in parsed.rdzv_conf.split(","))
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
        _ExitWithoutTraceback()
    )
    return interval(nodes)


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
        if not inside_torchrun(os.environ):
            agent_env(job, os.environ)
            if job.spec.command is None:
                preload_worker()
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
    args = torchrun_argv(plan, job.spec.command)
    log.info("%s: %s", plan.source, " ".join(args))
    poll_s = set_up_agent(args)
    return run_agent(job, args, plan.rdzv_endpoint, poll_s)


def run_agent(job: TrainingJob, args: list[str], endpoint: str, poll_s: float) -> int:
    """torchrun's agent until the workers finish; its exit code. Where the rendezvous'
    store went (the Master's pod, which holds it, ended), the agent joins the Master's
    next one in this process, up to fault.maxRestarts times: a new process would import
    torch and Lightning again, seconds of CPU beside the Master's own restart. It waits
    for the store at `endpoint` itself, every `poll_s` (store_wait.py: torch's client
    backs off for seconds)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousConnectionError,
        RendezvousError,
    )
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import DEFAULT_PORT
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    host, port = parse_rendezvous_endpoint(endpoint, DEFAULT_PORT)
    rejoined, rejoins = 0, job.spec.fault.max_restarts
    while True:
        try:
            # What a restarted pod would check first: whether the run ended meanwhile.
            if rejoined and already_finished(job):
                return 0
            agent_clock.mark("agent_rendezvous_start")
            if rejoined:  # the Master's new store, which its new agent opens
                await_port(host, port, poll_s)
            launch(args, lightning=job.spec.command is None)
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
        except RendezvousError as exc:
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            again = isinstance(exc, RendezvousConnectionError) and rejoined < rejoins
            log.error(
                "the rendezvous failed: %s%s; %s",
                exc,
                cause,
                f"joining the next one ({rejoined + 1} of {rejoins})" if again
                else "exiting, to join the next one",
            )  # fmt: skip
            if not again:
                return 1
            rejoined += 1
            agent_clock.restart("agent_start")  # the goodput account's start of this attempt
            continue
        return 0


if __name__ == "__main__":
    sys.exit(main())
