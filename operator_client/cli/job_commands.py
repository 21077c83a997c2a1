"""Commands that run and remove jobs and fetch their results: apply, wait, delete,
collect, report, doctor, chaos.
Each parses nothing and decides nothing about backends: it calls the Client and prints."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..client import Client
from ..client.jobs import JobText, trainjob_manifest
from ..errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadInput,
    JobNotFound,
    NoStorage,
    PreflightFailed,
)
from ..kubeflow.kinds import kind_of
from ..spec.quantities import parse_duration
from . import console, output
from .build_commands import run_build
from .clients import backend_flag, client_for
from .follow import follow
from .progress import TransferDisplay

if TYPE_CHECKING:
    from ..client import Collected, Finding, JobHandle
    from ..client.jobs import JobInput


def _job_input(file: str) -> JobInput:
    """The file's name, or for '-' standard input's text."""
    return JobText.read(sys.stdin) if file == "-" else file


def apply(args: argparse.Namespace) -> int:
    """`kctl-train apply`: render, check, submit; --wait follows, collects and reports."""
    client = client_for(args)
    job = _job_input(args.file)
    image = None
    if args.build is not None:
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
        _dry_run_output(args.output, handle.manifest)
        return EXIT_OK
    if submitted.dry_run:
        pods = submitted.pods
        if pods is not None and args.output != "name":  # what a local run would start
            output.objects(
                {"apiVersion": "v1", "kind": "List", "items": pods}, args.output or "yaml"
            )
        else:
            _dry_run_output(args.output, submitted.object)
        console.info(f"(server dry run: checked by the {client.info.name} backend, nothing stored)")
        if submitted.note:
            console.info(submitted.note)
        return EXIT_OK
    flag = backend_flag(args)
    if args.output in ("json", "yaml"):
        output.objects(submitted.object, args.output)
    else:
        resource = kind_of(submitted.object or handle.manifest or {}).resource
        print(f"{resource}/{handle.name} {submitted.verb} ({submitted.how})")
    if submitted.note:
        console.info(f"  note:    {submitted.note}")
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
    # Without --to, a store this machine reaches is collected to handle.collect's default.
    collect = args.to is not None or (client.info.store_reachable and not args.no_collect)
    return _follow_and_collect(
        handle, args, again=f"kctl-train apply {args.file}{flag}", collect=collect
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
    return _follow_and_collect(
        handle,
        args,
        again=f"kctl-train apply JOB_FILE{backend_flag(args)}",
        collect=args.to is not None,
    )


def _follow_and_collect(
    handle: JobHandle, args: argparse.Namespace, *, again: str, collect: bool
) -> int:
    view = follow(handle, logs=getattr(args, "follow", False), timeout=args.timeout)
    if view is None:
        console.info(
            f"still running after {args.timeout}s; it goes on: "
            f"kctl-train status {handle.name}{backend_flag(args)}"
        )
        return EXIT_FAILED
    if not view.succeeded:
        report = handle.failure()
        assert report is not None
        output.failure(report, again)
        return EXIT_INTERRUPTED if report.stopped else EXIT_FAILED
    if not collect:
        return EXIT_OK
    try:
        return _collected(
            lambda display: handle.collect(
                args.to,
                endpoint=args.endpoint,
                progress=display,
            ),
            handle.name,
        )
    except NoStorage as exc:  # it succeeded: a job that stores nothing has nothing to collect
        console.info(f"nothing to collect: {exc}")
        return EXIT_OK


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
    return _collected(
        lambda display: client.collect(
            args.name,
            source=args.source,
            to=args.to,
            endpoint=args.endpoint,
            all_checkpoints=args.all_checkpoints,
            checkpoint=args.checkpoint,
            consolidate=args.consolidate,
            concurrency=args.concurrency,
            progress=display,
        ),
        args.name,
    )


def report(args: argparse.Namespace) -> int:
    """`kctl-train report`: rebuild and print the report of a collected directory."""
    text, png = Client().report(args.target)
    sys.stdout.write(text)
    print(f"curves: {png}")
    return EXIT_OK


def _dry_run_output(fmt: str | None, body: Mapping[str, Any]) -> None:
    """What a dry run prints: with `-o name` the object's resource/name only, as kubectl
    prints it; else the object (YAML unless -o json)."""
    if fmt == "name":
        print(f"{kind_of(body).resource}/{body.get('metadata', {}).get('name', '?')}")
    else:
        output.objects(body, "json" if fmt == "json" else "yaml")


def doctor(args: argparse.Namespace) -> int:
    """`kctl-train doctor FILE`: the preflight checks of an apply, without applying."""
    client = client_for(args)
    job = _job_input(args.file)
    findings = client.preflight(job, force_namespace=args.force_namespace, operator=args.operator)
    _findings(findings, info=True)
    if all(f.level == "info" for f in findings):
        manifest = trainjob_manifest(job) or client.render(job, operator=args.operator)
        name = f"{manifest['kind'].lower()}/{manifest['metadata']['name']}"
        print(f"{name}: the {client.info.name} backend is ready for it")
    errors = [f for f in findings if f.level == "error"]
    if not errors:
        return EXIT_OK
    # As apply exits: 2 when the job (or a flag) is what must change, else 1.
    return PreflightFailed(str(args.file), findings).exit_code


def chaos(args: argparse.Namespace) -> int:
    """`kctl-train chaos`: inject a fault into one replica of a running local job."""
    try:
        seconds = parse_duration(args.duration) if args.duration else None
    except ValueError as exc:
        raise BadInput(f"--for: {exc}") from None
    handle = client_for(args).job(args.name)
    pod = handle.pod_of(args.replica)
    done = handle.inject(
        args.action, pod, seconds=seconds, delay_ms=args.delay, loss_percent=args.loss
    )
    print(f"{pod}: {done}")
    return EXIT_OK


def delete(args: argparse.Namespace) -> int:
    """`kctl-train delete`: stop a job and remove its record (stored data stays)."""
    client = client_for(args)
    namespace, name = None, args.name  # None: the client's namespace
    if args.filename is not None:
        if args.name is not None:
            raise BadInput("delete: the job's NAME or -f FILE, not both")
        namespace, name = client.identity(args.filename)
    elif args.name is None:
        raise BadInput("delete: give the job's NAME, or -f job.yaml")
    try:
        kind = kind_of(client.get(name, namespace).kind)
    except JobNotFound:
        kind = kind_of({})  # delete says it is missing, or ignores it
    if client.delete(name, namespace, wait=args.wait, missing_ok=args.ignore_not_found):
        print(f"{kind.resource}/{name} deleted ({client.info.name})")
    return EXIT_OK
