"""The job commands against a Kubernetes cluster (without --local). The `kubernetes`
client is imported here only, when one of these runs."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..cluster import lifecycle as lc
from ..cluster.errors import ClusterError
from ..cluster.kubernetes_backend import WATCH_SECONDS, KubernetesBackend, connect
from ..cluster.logs import replica_tag
from ..cluster.pod_reasons import pod_phase, pod_problems, restarts
from ..cluster.preflight import preflight
from ..render import to_json, to_yaml
from ..render.pytorchjob import ENDPOINT_ANNOTATION, REGION_ANNOTATION, RUN_ROOT_ANNOTATION
from . import console
from .console import FAILED_LOG_LINES
from .exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, CommandError
from .progress import StatusLine


def backend_for(args: argparse.Namespace) -> KubernetesBackend:
    return KubernetesBackend(connect(args.kubeconfig, args.context))


def state(obj: Mapping[str, Any]) -> str:
    """The job's state from its conditions (Created before the operator has seen it)."""
    conditions = obj.get("status", {}).get("conditions") or []
    for cond in reversed(conditions):
        if cond.get("status") == "True":
            return str(cond.get("type"))
    return "Pending" if not conditions else "Unknown"


def _ended(obj: Mapping[str, Any]) -> bool:
    return state(obj) in lc.FINISHED


def apply(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    """Server-side apply, after the preflight; --wait follows the job to its end."""
    meta = manifest["metadata"]
    backend = backend_for(args)
    findings = preflight(backend, manifest)
    for finding in findings:
        (console.error if finding.level == "error" else console.warning)(finding.message)
    if any(f.level == "error" for f in findings):
        raise CommandError(f"pytorchjob/{meta['name']} not applied: fix the errors above")
    before = backend.find(meta["namespace"], meta["name"])
    result = backend.apply(manifest, dry_run=args.dry_run == "server", force=args.force_conflicts)
    if args.dry_run == "server":
        sys.stdout.write(to_json(result) if args.output == "json" else to_yaml(result))
        console.info(
            "(server dry run: validated by the API server and the webhook, nothing stored)"
        )
        return EXIT_OK
    rv = result.get("metadata", {}).get("resourceVersion")
    changed = before is None or before.get("metadata", {}).get("resourceVersion") != rv
    verb = "created" if before is None else ("configured" if changed else "unchanged")
    if args.output in ("json", "yaml"):
        sys.stdout.write(to_json(result) if args.output == "json" else to_yaml(result))
    else:
        print(f"pytorchjob.kubeflow.org/{meta['name']} {verb} (server-side)")
    if not args.wait:
        return EXIT_OK
    return follow(backend, meta["namespace"], meta["name"], args)


class _PodView:
    """The live view while following: a thread lists the job's pods every 2 s, prints each
    new reason a pod is stuck once, and redraws the status line (the watch only wakes on
    changes of the job itself)."""

    def __init__(self, backend: KubernetesBackend, namespace: str, name: str) -> None:
        self.backend, self.namespace, self.name = backend, namespace, name
        self.line = StatusLine()
        self.seen: set[str] = set()
        self.pods: list[dict[str, Any]] = []
        self.job: dict[str, Any] = {}
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _PodView:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.refresh()  # the pods as the job ended, for the failure report
        self.line.stop()

    def say(self, text: str) -> None:
        with self._lock:
            if text not in self.seen:
                self.seen.add(text)
                self.line.print(text)

    def update(self, job: dict[str, Any]) -> None:
        self.job = job
        for cond in job.get("status", {}).get("conditions") or []:
            if cond.get("status") == "True":
                self.say(f"{cond.get('type')}: {cond.get('message')}")
        self._draw()

    def refresh(self) -> None:
        try:
            self.pods = self.backend.pods(self.namespace, self.name)
        except ClusterError:
            return  # a hiccup of the API: the next round tries again
        for pod in self.pods:
            name = pod["metadata"]["name"]
            problems = pod_problems(pod)
            for problem in problems:
                self.say(f"{name}: {problem}")
            if not problems and pod_phase(pod) == "Pending":
                # Nothing in the pod's status yet: the scheduler's and kubelet's warnings
                # (FailedScheduling, FailedMount, ...) are in its events.
                for event in self.backend.warnings(self.namespace, name):
                    self.say(f"{name}: {event}")

    def _draw(self) -> None:
        summary = "  ".join(
            f"{replica_tag(self.name, p['metadata']['name'])} {pod_phase(p)}"
            + (f" ({restarts(p)} restarts)" if restarts(p) else "")
            for p in self.pods
        )
        elapsed = time.monotonic() - self.started
        with self._lock:
            self.line.update(f"{state(self.job)} · {summary or 'no pods yet'} · {elapsed:.0f}s")

    def _run(self) -> None:
        while not self._stop.wait(2.0 if self.pods else 0.5):
            self.refresh()
            self._draw()


def follow(backend: KubernetesBackend, namespace: str, name: str, args: argparse.Namespace) -> int:
    """Watch the job to its end with a live view of its pods; collect on success."""
    started = time.monotonic()
    obj: dict[str, Any] = {}
    # The watch wakes at least this often, so that --timeout is honoured.
    wake = min(WATCH_SECONDS, int(args.timeout) + 1) if args.timeout else WATCH_SECONDS
    with _PodView(backend, namespace, name) as view:
        for obj in backend.watch_job(namespace, name, _ended, watch_seconds=wake):
            view.update(obj)
            if args.timeout and time.monotonic() - started > args.timeout:
                view.line.stop()
                console.info(f"still running after {args.timeout}s; the job goes on")
                return EXIT_FAILED
    pods = view.pods
    if state(obj) != lc.SUCCEEDED:
        conditions = obj.get("status", {}).get("conditions") or [{}]
        console.error(f"{state(obj)}: {conditions[-1].get('message', '')}")
        failing = [p for p in pods if pod_phase(p) == "Failed" or restarts(p)]
        for pod in failing[:1]:
            pod_name = pod["metadata"]["name"]
            console.info(f"last lines of {pod_name}:")
            try:
                for text in backend.log_lines(
                    namespace,
                    pod_name,
                    follow=False,
                    previous=restarts(pod) > 0 and pod_phase(pod) != "Failed",
                    tail=FAILED_LOG_LINES,
                ):
                    console.info(f"  {text}")
            except ClusterError as exc:
                console.info(f"  (no log: {exc})")
        return EXIT_FAILED
    if args.collect_to:
        return collect(
            backend,
            obj,
            Path(args.collect_to),
            all_checkpoints=False,
            concurrency=16,
            endpoint=args.collect_endpoint,
        )
    return EXIT_OK


def collect(
    backend: KubernetesBackend,
    obj: Mapping[str, Any],
    dest: Path,
    *,
    all_checkpoints: bool,
    concurrency: int,
    endpoint: str | None = None,
) -> int:
    """Collect a cluster job's run, found through its annotations. `endpoint` replaces the
    job's S3 endpoint when the one the pods use is not reachable from here."""
    from ..storage import StoreError, open_store
    from .job_commands import collect_and_report

    meta = obj["metadata"]
    annotations = meta.get("annotations", {})
    root = annotations.get(RUN_ROOT_ANNOTATION)
    if not root:
        raise CommandError(
            f"pytorchjob/{meta['name']} has no {RUN_ROOT_ANNOTATION} annotation: it was not "
            "rendered by kctl-train with storage (use --from STORAGE_URI)"
        )
    try:
        store = open_store(
            root,
            endpoint=endpoint or annotations.get(ENDPOINT_ANNOTATION),
            region=annotations.get(REGION_ANNOTATION),
            concurrency=concurrency,
        )
    except StoreError as exc:
        raise CommandError(str(exc)) from None
    return collect_and_report(
        store,
        {"name": meta["name"], "namespace": meta.get("namespace", "default"), "state": state(obj)},
        dest,
        None,
        all_checkpoints=all_checkpoints,
        concurrency=concurrency,
    )


def status(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    namespace = args.namespace or "default"
    obj = backend.get(namespace, args.name)
    pods = backend.pods(namespace, args.name)
    if args.output != "text":
        body = {**obj, "pods": pods}
        sys.stdout.write(to_json(body) if args.output == "json" else to_yaml(body))
        return EXIT_OK
    print(f"pytorchjob/{args.name}  {state(obj)}")
    print(f"{'REPLICA':<14}{'PHASE':<12}{'RESTARTS':<10}NODE")
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName") or "-"
        tag = replica_tag(args.name, pod["metadata"]["name"])
        print(f"{tag:<14}{pod_phase(pod):<12}{restarts(pod):<10}{node}")
        for problem in pod_problems(pod):
            print(f"  {problem}")
    for cond in obj.get("status", {}).get("conditions") or []:
        flag = "" if cond.get("status") == "True" else " (no longer)"
        print(
            f"  {cond.get('lastTransitionTime')}  {cond.get('type')}{flag}: {cond.get('message')}"
        )
    return EXIT_OK


def list_jobs(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    jobs = backend.list_jobs(args.namespace)
    pods_of = backend.pods_by_job(args.namespace) if args.output == "text" else {}
    if args.output != "text":
        body = {"apiVersion": "v1", "kind": "List", "items": jobs}
        sys.stdout.write(to_json(body) if args.output == "json" else to_yaml(body))
        return EXIT_OK
    print(f"{'NAMESPACE':<12}{'NAME':<28}{'STATE':<12}{'NODES':<7}{'RESTARTS':<10}AGE")
    for job in jobs:
        meta = job["metadata"]
        specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
        nodes = sum(int(r.get("replicas", 1)) for r in specs.values())
        pods = pods_of.get((meta.get("namespace", "default"), meta["name"]), [])
        print(
            f"{meta.get('namespace', ''):<12}{meta['name']:<28}{state(job):<12}{nodes:<7}"
            f"{sum(restarts(p) for p in pods):<10}{_age(meta.get('creationTimestamp'))}"
        )
    return EXIT_OK


def _age(timestamp: str | None) -> str:
    """kubectl's AGE column from an RFC 3339 creationTimestamp."""
    from datetime import datetime, timezone

    if not timestamp:
        return "-"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    seconds = int((datetime.now(timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def logs(args: argparse.Namespace) -> int:
    """Every replica's log with prefixes; waits for Pending pods; follows restarts."""
    backend = backend_for(args)
    namespace = args.namespace or "default"
    deadline = time.monotonic() + 300
    while True:
        pods = backend.pods(namespace, args.name)
        tags = {replica_tag(args.name, p["metadata"]["name"]): p for p in pods}
        if args.replica and args.replica != "all" and args.replica not in tags and pods:
            raise CommandError(
                f"no replica {args.replica!r}; the job has {', '.join(tags)}", EXIT_BAD_INPUT
            )
        chosen = {t: p for t, p in tags.items() if args.replica in (None, "all", t)}
        if chosen and all(pod_phase(p) != "Pending" for p in chosen.values()):
            break
        if time.monotonic() > deadline:
            raise CommandError(f"the pods of {args.name} are still Pending after 5 minutes")
        time.sleep(2)
    prefix = len(chosen) > 1
    lock = threading.Lock()
    errors: list[str] = []

    def emit(tag: str, text: str) -> None:
        with lock:
            print(f"[{tag}] {text}" if prefix else text, flush=True)

    def stream(tag: str, pod: str) -> None:
        try:
            seen = restarts(chosen[tag])
            while True:
                for text in backend.log_lines(
                    namespace, pod, follow=args.follow, previous=args.previous
                ):
                    emit(tag, text)
                if not args.follow or args.previous:
                    return
                restarted = _next_container(backend, namespace, args.name, pod, seen)
                if restarted is None:
                    return
                seen = restarted
                emit(tag, f"--- {pod} restarted (restart {seen}) ---")
        except ClusterError as exc:
            errors.append(str(exc))

    threads = [
        threading.Thread(target=stream, args=(t, p["metadata"]["name"]), daemon=True)
        for t, p in chosen.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    for error in errors:
        console.error(error)
    return EXIT_FAILED if errors else EXIT_OK


def _next_container(
    backend: KubernetesBackend, namespace: str, name: str, pod: str, seen: int
) -> int | None:
    """After a followed log ends: the pod's new restart count once its container has
    restarted, or None when the job has ended or the pod is gone."""
    while True:
        current = {p["metadata"]["name"]: p for p in backend.pods(namespace, name)}.get(pod)
        if current is None:
            return None
        job = backend.find(namespace, name)
        if job is None or _ended(job):
            return None
        if restarts(current) > seen and pod_phase(current) == "Running":
            return restarts(current)
        if pod_phase(current) in ("Succeeded", "Failed"):
            return None
        time.sleep(2)


def delete(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    namespace = args.namespace or "default"
    if backend.find(namespace, args.name) is None:
        if args.ignore_not_found:
            return EXIT_OK
        raise ClusterError(f"pytorchjob/{args.name} not found in namespace {namespace}", 404)
    backend.delete(namespace, args.name)
    if args.wait:
        while backend.find(namespace, args.name) is not None:
            time.sleep(1)
    print(f"pytorchjob.kubeflow.org/{args.name} deleted")
    return EXIT_OK


def doctor(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    findings = preflight(backend_for(args), manifest)
    for finding in findings:
        (console.error if finding.level == "error" else console.warning)(finding.message)
    if not findings:
        print(f"pytorchjob/{manifest['metadata']['name']}: the cluster is ready for it")
    return EXIT_FAILED if any(f.level == "error" for f in findings) else EXIT_OK
