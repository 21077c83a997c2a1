"""Commands that run jobs and fetch their results: apply, status, list, wait, logs,
delete, collect, report, doctor. The local backend (`--local`) is handled here; cluster jobs
go to cluster_commands, which alone imports the kubernetes client."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..cluster import lifecycle as lc
from ..cluster.jobdir import JobDir
from ..cluster.local import LocalBackend, LocalJobError, state_of
from ..cluster.local_storage import store_for_local_run
from ..cluster.logs import LogFollower, replica_tag, tail
from ..kubeflow.webhook import webhook_errors
from ..render import render as render_job
from ..render import to_json, to_yaml
from ..render.pytorchjob import NotRenderedError, job_of
from ..spec import load_job, load_job_text
from ..spec.model import TrainingJob
from ..storage import ObjectStore, StoreError
from . import console
from .console import FAILED_LOG_LINES
from .exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CommandError
from .progress import StatusLine, TrainingProgress, TransferDisplay

# apply


def _load(args: argparse.Namespace) -> TrainingJob:
    loaded = load_job_text(sys.stdin.read(), "<stdin>") if args.file == "-" else load_job(args.file)
    # A local run always has a store (cluster/local_storage.py): "no storage" does not apply.
    console.report(w for w in loaded.warnings if not (args.local and w.path == "spec.storage"))
    job = loaded.job
    if args.namespace and args.namespace != job.metadata.namespace:
        if "namespace" in job.metadata.model_fields_set and not args.force_namespace:
            raise CommandError(
                f"{loaded.source}: metadata.namespace is {job.metadata.namespace!r} but "
                f"-n says {args.namespace!r}; drop -n, change the file, or --force-namespace",
                EXIT_BAD_INPUT,
            )
        job = job.model_copy(
            update={"metadata": job.metadata.model_copy(update={"namespace": args.namespace})}
        )
    return job


def apply(args: argparse.Namespace) -> int:
    """`kctl-train apply`: render, run (--local), follow, collect and report."""
    job = _load(args)
    if args.local:
        try:
            job, note = store_for_local_run(job, args.storage)
        except ValueError:
            raise CommandError(
                f"--storage: {args.storage!r} is not a store URI; use s3://bucket/prefix or "
                "file:///absolute/path",
                EXIT_BAD_INPUT,
            ) from None
        if note:
            console.warning(note)
    manifest = render_job(job)
    problems = webhook_errors(manifest)
    if problems:
        raise CommandError(f"internal error, the operator would reject the job: {problems}")
    name = job.metadata.name
    if args.dry_run == "client":
        sys.stdout.write(to_json(manifest) if args.output == "json" else to_yaml(manifest))
        return EXIT_OK
    if not args.local:
        from . import cluster_commands

        return cluster_commands.apply(args, manifest)
    backend = LocalBackend()
    try:
        backend.check(manifest)
    except LocalJobError as exc:
        raise CommandError(str(exc), EXIT_BAD_INPUT) from None
    if args.dry_run == "server":
        console.info(
            f"pytorchjob/{name} would be started locally (dry run: checked, nothing started)"
        )
        return EXIT_OK
    resumes = _resume_step(job)  # before the run starts to write
    try:
        jobdir = backend.submit(manifest)
    except LocalJobError as exc:
        raise CommandError(str(exc)) from None
    storage = job.spec.storage
    if args.output in ("json", "yaml"):
        body = {**manifest, "status": jobdir.status().get("status", {})}
        sys.stdout.write(to_json(body) if args.output == "json" else to_yaml(body))
    else:
        print(f"pytorchjob.kubeflow.org/{name} created (local)")
    console.info(f"  storage: {storage.uri if storage else '-'}")
    if resumes is not None:
        console.info(
            f"  resume:  the store holds a checkpoint at step {resumes}; the run continues from it"
        )
    console.info(
        f"  logs:    kctl-train logs {name} --local -f   (files in {jobdir.path / 'logs'})"
    )
    if not args.wait:
        console.info(f"  status:  kctl-train status {name} --local")
        return EXIT_OK
    state = _wait(backend, jobdir, follow=args.follow, timeout=args.timeout)
    if state is None:
        console.info(
            f"still running after {args.timeout}s; it goes on: kctl-train status {name} --local"
        )
        return EXIT_FAILED
    if state != lc.SUCCEEDED:
        return _explain_end(jobdir, state, args.file)
    if args.no_collect:
        return EXIT_OK
    dest = Path(args.collect_to or Path("results") / name)
    meta = {"name": name, "namespace": job.metadata.namespace}
    return collect_and_report(
        _job_store(job, 16), meta, dest, jobdir, all_checkpoints=False, concurrency=16
    )


def _resume_step(job: TrainingJob) -> int | None:
    """The step of the checkpoint the run will resume from: the newest committed one
    whose files verify, as the runtime chooses (None: a fresh start)."""
    import tempfile

    from ..runtime.checkpoints import newest_verified

    if job.spec.checkpoint.resume != "auto":
        return None
    try:
        with tempfile.TemporaryDirectory(prefix="kctl-train-verify-") as tmp:
            found = newest_verified(_job_store(job, 8), Path(tmp))
    except StoreError:
        return None
    return found[0].step if found else None


def _wait(backend: LocalBackend, job: JobDir, *, follow: bool, timeout: float | None) -> str | None:
    """Follow the job to its end (Ctrl-C stops it); returns its state, None on timeout."""
    try:
        return _watch(job, follow=follow, timeout=timeout)
    except KeyboardInterrupt:
        pass
    console.info(
        "\nstopping the job: the replicas commit an emergency checkpoint (Ctrl-C again to kill now)"
    )
    backend.stop(job, "stopped by Ctrl-C")
    try:
        backend.wait_stopped(job, timeout=float("inf"))
    except KeyboardInterrupt:
        backend.stop(job, "killed by a second Ctrl-C", force=True)
        backend.wait_stopped(job, timeout=30)
    return state_of(job, job.status())


def _watch(job: JobDir, *, follow: bool, timeout: float | None) -> str | None:
    manifest = job.manifest()
    name = manifest["metadata"]["name"]
    pods = [r.name for r in lc.replicas_of(manifest)]
    follower = LogFollower({replica_tag(name, p): job.log(p) for p in pods})
    progress = TrainingProgress()
    line = None if follow else StatusLine()
    seen: set[tuple[str, str, str]] = set()
    started = time.monotonic()
    try:
        while True:
            status = job.status()
            state = state_of(job, status)
            ended = state in lc.ENDED and not job.supervisor_alive()
            for tag, text in follower.poll(final=ended):
                progress.feed(text)
                if follow:
                    print(f"[{tag}] {text}", flush=True)
            for cond in status.get("status", {}).get("conditions", []):
                key = (cond["type"], cond["reason"], cond["message"])
                if key not in seen and cond["status"] == "True":
                    seen.add(key)
                    message = f"{cond['type']}: {cond['message']}"
                    if line is not None:
                        line.print(message)
                    else:
                        console.info(message)
            if ended or state == "Unknown":
                return state
            if line is not None:
                elapsed = time.monotonic() - started
                line.update(f"{state} · {progress.text()} · {elapsed:.0f}s")
            if timeout and time.monotonic() - started > timeout:
                return None
            time.sleep(0.2)
    finally:
        if line is not None:
            line.stop()


def _explain_end(job: JobDir, state: str, source: str) -> int:
    status = job.status()
    conditions = status.get("status", {}).get("conditions", [])
    reason = conditions[-1]["message"] if conditions else "the supervisor stopped"
    if state == "Unknown":
        reason = f"the local supervisor died; see {job.supervisor_log}"
    if state == lc.SUSPENDED:
        console.info(f"{state}: {reason}")
    else:
        console.error(f"{state}: {reason}")
    failed = [
        r for r in status.get("local", {}).get("replicas", []) if r.get("exitCode") not in (None, 0)
    ]
    for replica in failed[:1] if state != lc.SUSPENDED else []:
        console.info(f"last lines of {replica['name']} (exit code {replica['exitCode']}):")
        for text in tail(Path(replica["log"]), FAILED_LOG_LINES):
            console.info(f"  {text}")
    if state == lc.SUSPENDED:
        console.info(f"committed checkpoints are kept; `kctl-train apply {source} --local` resumes")
        return EXIT_INTERRUPTED
    return EXIT_FAILED


# collect and report


def collect_and_report(
    store: ObjectStore,
    meta: dict[str, Any],
    dest: Path,
    jobdir: JobDir | None,
    *,
    all_checkpoints: bool,
    concurrency: int,
) -> int:
    """Collect `store` (a run root) into dest, write and print the report."""
    from ..collect.collect import CollectError, collect
    from ..collect.report import write

    describe: dict[str, Any] = {"job": dict(meta)}
    if jobdir is not None:
        local = jobdir.status().get("local", {})
        describe["job"].update(
            state=local.get("state"), started=local.get("started"), completed=local.get("completed")
        )
    display = TransferDisplay(f"collecting {meta['name']}")
    try:
        result = collect(
            store,
            dest,
            all_checkpoints=all_checkpoints,
            concurrency=concurrency,
            progress=display,
            describe=describe,
        )
    except (CollectError, StoreError) as exc:
        raise CommandError(str(exc)) from None
    for problem in result.problems:
        console.warning(problem)
    _, _, txt = write(dest)
    print(f"collected into {dest}/  (summary.json, report.png)")
    sys.stdout.write(txt.read_text())
    return EXIT_FAILED if result.problems else EXIT_OK


def _job_store(job: TrainingJob, concurrency: int) -> ObjectStore:
    from ..runtime.context import store_for

    return store_for(job, concurrency=concurrency)


def collect_cmd(args: argparse.Namespace) -> int:
    """`kctl-train collect`: the run's committed results into a directory, then the report."""
    from ..storage import open_store, run_root

    namespace = args.namespace or "default"
    meta = {"name": args.name, "namespace": namespace}
    jobdir = None
    if args.source:
        try:
            store = open_store(
                run_root(args.source, namespace, args.name),
                endpoint=args.endpoint,
                concurrency=args.concurrency,
            )
        except StoreError as exc:
            raise CommandError(f"--from: {exc}", EXIT_BAD_INPUT) from None
    elif args.local:
        jobdir = _local_job(args)
        try:
            store = _job_store(job_of(jobdir.manifest()), args.concurrency)
        except NotRenderedError as exc:
            raise CommandError(str(exc)) from None
    else:
        from . import cluster_commands

        backend = cluster_commands.backend_for(args)
        return cluster_commands.collect(
            backend,
            backend.get(namespace, args.name),
            Path(args.to or Path("results") / args.name),
            all_checkpoints=args.all_checkpoints,
            concurrency=args.concurrency,
            endpoint=args.endpoint,
        )
    dest = Path(args.to or Path("results") / args.name)
    return collect_and_report(
        store,
        meta,
        dest,
        jobdir,
        all_checkpoints=args.all_checkpoints,
        concurrency=args.concurrency,
    )


def report(args: argparse.Namespace) -> int:
    """`kctl-train report`: rebuild and print the report of a collected directory."""
    from ..collect.report import ReportError, write

    target = Path(args.target)
    directory = target if target.is_dir() else Path("results") / args.target
    try:
        _, png, _ = write(directory)
    except ReportError as exc:
        raise CommandError(str(exc)) from None
    sys.stdout.write((directory / "report.txt").read_text())
    print(f"curves: {png}")
    return EXIT_OK


# status, logs, delete


def _local_job(args: argparse.Namespace) -> JobDir:
    try:
        return LocalBackend().get(args.namespace or "default", args.name)
    except LocalJobError as exc:
        raise CommandError(str(exc)) from None


def _age(since: float | None, until: float | None = None) -> str:
    if not since:
        return "-"
    seconds = int((until or time.time()) - since)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def status(args: argparse.Namespace) -> int:
    """`kctl-train status`: one job's conditions and replicas, or every local job."""
    if not args.local:
        from . import cluster_commands

        return (
            cluster_commands.list_jobs(args) if args.name is None else cluster_commands.status(args)
        )
    if args.name is None:
        jobs = LocalBackend().list(args.namespace)
        statuses = [(n, d, d.status()) for n, d in jobs]
        rows = [(d.path.parent.name, n, state_of(d, body), body) for n, d, body in statuses]
        if args.output != "text":
            items = [s for *_, s in rows]
            listing = {"apiVersion": "v1", "kind": "List", "items": items}
            sys.stdout.write(to_json(listing) if args.output == "json" else to_yaml(listing))
            return EXIT_OK
        print(f"{'NAMESPACE':<12}{'NAME':<28}{'STATE':<12}AGE")
        for namespace, name, state, row in rows:
            started = row.get("local", {}).get("started")
            print(f"{namespace:<12}{name:<28}{state:<12}{_age(started)}")
        return EXIT_OK
    job = _local_job(args)
    body = job.status()
    state = state_of(job, body)
    if args.output != "text":
        full = {**job.manifest(), "status": body.get("status", {}), "local": body.get("local", {})}
        sys.stdout.write(to_json(full) if args.output == "json" else to_yaml(full))
        return EXIT_OK
    local = body.get("local", {})
    print(
        f"pytorchjob/{args.name} (local)  {state}  "
        f"{_age(local.get('started'), local.get('completed'))}"
    )
    print(f"{'REPLICA':<14}{'PHASE':<11}{'RESTARTS':<10}{'EXIT':<6}{'PID':<9}LOG")
    name = job.manifest()["metadata"]["name"]
    for r in local.get("replicas", []):
        exit_code = "-" if r.get("exitCode") is None else str(r["exitCode"])
        print(
            f"{replica_tag(name, r['name']):<14}{r['phase']:<11}{r['restarts']:<10}"
            f"{exit_code:<6}{r.get('pid') or '-'!s:<9}{r['log']}"
        )
    for cond in body.get("status", {}).get("conditions", []):
        when = cond["lastTransitionTime"]
        flag = "" if cond["status"] == "True" else " (no longer)"
        print(f"  {when}  {cond['type']}{flag}: {cond['message']}")
    progress = TrainingProgress()
    for r in local.get("replicas", []):
        for text in tail(Path(r["log"]), 200):
            progress.feed(text)
    if progress.step:
        print(f"progress: {progress.text()}")
    return EXIT_OK if state != "Unknown" else EXIT_FAILED


def logs(args: argparse.Namespace) -> int:
    """`kctl-train logs`: every replica's log with a [replica] prefix (-f: follow)."""
    if not args.local:
        from . import cluster_commands

        return cluster_commands.logs(args)
    job = _local_job(args)
    manifest = job.manifest()
    name = manifest["metadata"]["name"]
    pods = {replica_tag(name, r.name): job.log(r.name) for r in lc.replicas_of(manifest)}
    if args.replica:
        if args.replica not in pods:
            raise CommandError(
                f"no replica {args.replica!r}; the job has {', '.join(pods)}", EXIT_BAD_INPUT
            )
        pods = {args.replica: pods[args.replica]}
    prefix = len(pods) > 1
    follower = LogFollower(pods)
    while True:
        ended = state_of(job, job.status()) in (*lc.ENDED, "Unknown") and not job.supervisor_alive()
        for tag, text in follower.poll(final=ended or not args.follow):
            print(f"[{tag}] {text}" if prefix else text, flush=True)
        if ended or not args.follow:
            return EXIT_OK
        time.sleep(0.2)


def delete(args: argparse.Namespace) -> int:
    """`kctl-train delete`: stop a local job and remove its record (stored data stays)."""
    if not args.local:
        from . import cluster_commands

        return cluster_commands.delete(args)
    backend = LocalBackend()
    job = backend.job(args.namespace or "default", args.name)
    if not job.exists():
        if args.ignore_not_found:
            return EXIT_OK
        raise CommandError(f"no local job {args.namespace or 'default'}/{args.name}")
    running = job.supervisor_alive()
    if running:
        console.info(
            f"stopping {args.name}: SIGTERM to its replicas, then SIGKILL after the grace period"
        )
    try:
        backend.delete(job)
    except LocalJobError as exc:
        raise CommandError(str(exc)) from None
    print(f"pytorchjob.kubeflow.org/{args.name} deleted (local)")
    return EXIT_OK


def list_cmd(args: argparse.Namespace) -> int:
    """`kctl-train list`: a table of jobs (a cluster's, or the local ones)."""
    args.name = None
    return status(args)


def wait(args: argparse.Namespace) -> int:
    """`kctl-train wait`: follow a job to its end; exit 0 on success, 1 otherwise."""
    if args.local:
        job = _local_job(args)
        state = _wait(LocalBackend(), job, follow=False, timeout=args.timeout)
        if state is None:
            return EXIT_FAILED
        return EXIT_OK if state == lc.SUCCEEDED else _explain_end(job, state, args.name)
    from . import cluster_commands

    backend = cluster_commands.backend_for(args)
    return cluster_commands.follow(backend, args.namespace or "default", args.name, args)


def doctor(args: argparse.Namespace) -> int:
    """`kctl-train doctor FILE`: the preflight checks of an apply, without applying."""
    from . import cluster_commands

    job = _load(args)
    return cluster_commands.doctor(args, render_job(job))
