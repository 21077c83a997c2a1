"""Commands that run jobs and fetch their results: apply, wait, collect, report, doctor.
Each parses nothing and decides nothing about backends: it calls the Client and prints."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import Progress
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadInput,
    KctlTrainError,
    PreflightFailed,
    WaitTimeout,
)
from ..kubeflow.kinds import kind_of
from . import console, output
from .progress import StatusLine, TransferDisplay

if TYPE_CHECKING:
    from ..client import Client, Collected, Event, Finding, JobHandle, JobView
    from ..client.jobs import JobInput


def client_for(args: argparse.Namespace) -> Client:
    """The backend factory of the CLI: --local, else the cluster of --kubeconfig and
    --context (connected on first use)."""
    from ..client import Client

    return Client(
        "local" if args.local else "kubernetes",
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        progress=console.info,
        runtimes=getattr(args, "runtime", None) or (),
        secrets=getattr(args, "secret", None) or (),
        configmaps=getattr(args, "configmap", None) or (),
    )


def _job_input(file: str) -> JobInput:
    """The file's name, or for '-' standard input's text (a job file or a TrainJob)."""
    if file != "-":
        return file
    from ..spec import load_job_text
    from ..spec.loader import MAX_BYTES

    text = sys.stdin.read(MAX_BYTES + 1)
    return text if "\n" in text else load_job_text(text, "<stdin>").job


def apply(args: argparse.Namespace) -> int:
    """`kctl-train apply`: render, check, submit; --wait follows, collects and reports."""
    client = client_for(args)
    job = _job_input(args.file)
    image = None
    if args.build is not None:
        from .build_commands import run_build

        if not args.local and not args.repo:
            raise BadInput(
                "--build for a cluster needs --repo (or $KCTL_TRAIN_IMAGE_REPO): the "
                "registry repository its nodes pull the image from"
            )
        image = run_build(client, args, args.build, job)
        console.info(f"image: {image.reference}")
    try:
        handle = client.apply(
            job,
            force_namespace=args.force_namespace,
            storage=args.storage,
            dry_run=None if args.dry_run == "none" else args.dry_run,
            force_conflicts=args.force_conflicts,
            image=image,
            operator=args.operator,
        )
    except PreflightFailed as exc:
        _findings(exc.findings)
        raise
    console.report(handle.warnings)
    if handle.note:
        console.warning(handle.note)
    _findings(handle.findings)
    submitted = handle.submitted
    if submitted is None:  # --dry-run=client
        assert handle.manifest is not None
        output.objects(handle.manifest, "json" if args.output == "json" else "yaml")
        return EXIT_OK
    if submitted.dry_run:
        output.objects(submitted.object, "json" if args.output == "json" else "yaml")
        console.info(
            f"(server dry run: checked by the {client.backend.name} backend, nothing stored)"
        )
        if submitted.note:
            console.info(submitted.note)
        return EXIT_OK
    flag = client.backend.flag
    if args.output in ("json", "yaml"):
        output.objects(submitted.object, args.output)
    else:
        resource = kind_of(submitted.object or handle.manifest or {}).resource
        print(f"{resource}/{handle.name} {submitted.verb} ({submitted.how})")
    view = submitted.view
    console.info(f"  storage: {view.storage.root if view and view.storage else '-'}")
    if submitted.resume_step is not None:
        console.info(
            f"  resume:  the store holds a checkpoint at step {submitted.resume_step}; "
            "the run continues from it"
        )
    files = f"   (files in {submitted.logs_at})" if submitted.logs_at else ""
    console.info(f"  logs:    kctl-train logs {handle.name}{flag} -f{files}")
    if not args.wait:
        console.info(f"  status:  kctl-train status {handle.name}{flag}")
        return EXIT_OK
    collect_to = args.collect_to
    if collect_to is None and client.backend.store_reachable and not args.no_collect:
        collect_to = str(Path("results") / handle.name)
    return _follow_and_collect(
        handle, args, again=f"kctl-train apply {args.file}{flag}", collect_to=collect_to
    )


def _findings(findings: Sequence[Finding], *, info: bool = False) -> None:
    for finding in findings:
        if finding.level == "info":
            if info:
                console.info(finding.message)
        else:
            (console.error if finding.level == "error" else console.warning)(finding.message)


def wait(args: argparse.Namespace) -> int:
    """`kctl-train wait`: follow a job to its end; exit 0 on success, 1 otherwise."""
    handle = client_for(args).job(args.name)
    flag = handle.backend.flag
    return _follow_and_collect(
        handle, args, again=f"kctl-train apply JOB_FILE{flag}", collect_to=args.collect_to
    )


def _follow_and_collect(
    handle: JobHandle, args: argparse.Namespace, *, again: str, collect_to: str | None
) -> int:
    view = follow(handle, logs=getattr(args, "follow", False), timeout=args.timeout)
    if view is None:
        console.info(
            f"still running after {args.timeout}s; it goes on: "
            f"kctl-train status {handle.name}{handle.backend.flag}"
        )
        return EXIT_FAILED
    if not view.succeeded:
        report = handle.failure()
        assert report is not None
        output.failure(report, again)
        return EXIT_INTERRUPTED if report.stopped else EXIT_FAILED
    if collect_to is None:
        return EXIT_OK
    return _collected(
        lambda display: handle.collect(
            collect_to,
            endpoint=args.collect_endpoint,
            progress=display,
        ),
        handle.name,
    )


class _Display:
    """The live view of a followed job: new conditions and replica problems as lines,
    one redrawn status line (state, replicas, progress, time)."""

    def __init__(self, name: str, status_line: bool) -> None:
        self.name = name
        self.line = StatusLine() if status_line else None
        self.progress: Progress | None = None
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if self.line is not None:
            self.line.print(text)
        else:
            console.info(text)

    def __call__(self, event: Event) -> None:
        from ..client import ConditionReached, JobChanged, ProgressReport, ReplicaNote

        if isinstance(event, ConditionReached):
            self.say(f"{event.condition.type}: {event.condition.message}")
        elif isinstance(event, ReplicaNote):
            self.say(f"{event.replica}: {event.text}")
        elif isinstance(event, ProgressReport):
            self.progress = event.progress
        elif isinstance(event, JobChanged) and self.line is not None:
            self.line.update(self._summary(event.view))

    def _summary(self, view: JobView) -> str:
        pods = "  ".join(
            f"{r.tag} {r.phase}" + (f" ({r.restarts} restarts)" if r.restarts else "")
            for r in view.replicas
        )
        progress = self.progress.text() if self.progress else "starting"
        elapsed = time.monotonic() - self.started
        return f"{view.state} · {pods or 'no pods yet'} · {progress} · {elapsed:.0f}s"

    def stop(self) -> None:
        if self.line is not None:
            self.line.stop()


def follow(handle: JobHandle, *, logs: bool, timeout: float | None) -> JobView | None:
    """Follow the job to its end, showing it as it goes (logs: every replica's lines);
    its final view, or None when `timeout` passed first. Ctrl-C stops a job the backend
    can stop (an emergency checkpoint first; Ctrl-C again kills it)."""
    display = _Display(handle.name, status_line=not logs)
    printer = None
    if logs:
        printer = threading.Thread(target=_print_logs, args=(handle,), daemon=True)
        printer.start()
    try:
        return handle.wait(timeout=timeout, on_event=display)
    except WaitTimeout:
        return None
    except KeyboardInterrupt:
        display.stop()
        if not handle.stop():
            raise
        console.info(
            "\nstopping the job: the replicas commit an emergency checkpoint "
            "(Ctrl-C again to kill now)"
        )
        try:
            return handle.wait()
        except KeyboardInterrupt:
            handle.stop(force=True)
            return handle.wait(timeout=30)
    finally:
        display.stop()
        if printer is not None:
            printer.join(timeout=5)


def _print_logs(handle: JobHandle) -> None:
    try:
        for line in handle.logs(follow=True):
            print(f"[{line.replica}] {line.text}", flush=True)
    except KctlTrainError as exc:
        console.warning(f"log stream ended: {exc}")


def _collected(run: Callable[[TransferDisplay], Collected], name: str) -> int:
    """Run a collect with a transfer display, then print the report."""
    display = TransferDisplay(f"collecting {name}")
    result = run(display)
    for problem in result.problems:
        console.warning(problem)
    print(f"collected into {result.dest}/  (summary.json, report.png)")
    sys.stdout.write(result.report)
    return EXIT_FAILED if result.problems else EXIT_OK


def collect_cmd(args: argparse.Namespace) -> int:
    """`kctl-train collect`: the run's committed results into a directory, then the report."""
    client = client_for(args)
    if args.source:
        return _collected(
            lambda display: client.collect_from(
                args.source,
                args.name,
                to=args.to,
                endpoint=args.endpoint,
                all_checkpoints=args.all_checkpoints,
                consolidate=args.consolidate,
                concurrency=args.concurrency,
                progress=display,
            ),
            args.name,
        )
    handle = client.job(args.name)
    return _collected(
        lambda display: handle.collect(
            args.to,
            all_checkpoints=args.all_checkpoints,
            consolidate=args.consolidate,
            concurrency=args.concurrency,
            endpoint=args.endpoint,
            progress=display,
        ),
        args.name,
    )


def report(args: argparse.Namespace) -> int:
    """`kctl-train report`: rebuild and print the report of a collected directory."""
    from ..collect.report import write

    target = Path(args.target)
    directory = target if target.is_dir() else Path("results") / args.target
    _, png, _ = write(directory)
    sys.stdout.write((directory / "report.txt").read_text())
    print(f"curves: {png}")
    return EXIT_OK


def doctor(args: argparse.Namespace) -> int:
    """`kctl-train doctor FILE`: the preflight checks of an apply, without applying."""
    from ..client.jobs import trainjob_manifest

    client = client_for(args)
    job = _job_input(args.file)
    findings = client.preflight(job, force_namespace=args.force_namespace, operator=args.operator)
    _findings(findings, info=True)
    if all(f.level == "info" for f in findings):
        manifest = trainjob_manifest(job) or client.render(job, operator=args.operator)
        name = f"{manifest['kind'].lower()}/{manifest['metadata']['name']}"
        print(f"{name}: the {client.backend.name} backend is ready for it")
    return EXIT_FAILED if any(f.level == "error" for f in findings) else EXIT_OK


def chaos(args: argparse.Namespace) -> int:
    """`kctl-train chaos`: inject a fault into one replica of a running local job."""
    from ..spec.units import parse_duration

    try:
        seconds = parse_duration(args.duration) if args.duration else None
    except ValueError as exc:
        raise BadInput(f"--for: {exc}") from None
    prefix = f"{args.name}-"
    replica = args.replica if args.replica.startswith(prefix) else prefix + args.replica
    done = (
        client_for(args)
        .job(args.name)
        .inject(args.action, replica, seconds=seconds, delay_ms=args.delay, loss_percent=args.loss)
    )
    print(f"{replica}: {done}")
    return EXIT_OK
