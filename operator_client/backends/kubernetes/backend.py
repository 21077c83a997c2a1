"""The Kubernetes backend: PyTorchJobs on a cluster with Kubeflow's training-operator, and
TrainJobs on one with Kubeflow Trainer v2 (kubeflow/kinds.py says where each lives).

Server-side apply with field manager `kctl-train`; the job's view combines the job's
conditions (a TrainJob's also its jobsStatus) with its pods (why each is stuck, in one
line: pod_reasons.py). A job is found by name among both kinds.
The API client is imported and connects on first use: a Client that only renders
needs no cluster and never loads the kubernetes package.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...contract import Progress
from ...controlplane import lifecycle as lc
from ...errors import ClusterError, JobNotFound
from ...kubeflow import trainjob as tj
from ...kubeflow.kinds import KINDS, TRAINJOB, Kind, kind_of
from ..base import Backend
from ..types import (
    Event,
    Finding,
    JobChanged,
    JobView,
    LogLine,
    ProgressReport,
    Replica,
    StorageLocation,
    Submitted,
)
from ..views import conditions_of, new_events, pick, replica_count
from .pod_reasons import pod_phase, pod_problems, restarts
from .pod_view import (
    Pods,
    apply_changed,
    epoch,
    finished,
    grace_of,
    holding,
    image_pull_seconds,
    job_state_words,
    replica_of,
    terminating,
)

if TYPE_CHECKING:
    from .api import Api

# Aliases (Pods too, from pod_view): inside the class, `list` is the Backend method.
Replicas = list[Replica]
Warnings = dict[str, list[str]]  # a Pending pod's Warning events, by pod

# Who writes each kind's status: named while a job waits for it.
OPERATORS = {"PyTorchJob": "training-operator", "TrainJob": "Trainer controller"}
PODS_EVERY = 2.0  # seconds between pod listings while watching (0.5 before any pod exists)
PENDING_LOGS_TIMEOUT = 300.0  # how long `logs` waits for Pending pods
GONE_MARGIN = 60  # beyond the pods' grace period: the garbage collector's and kubelet's time


class KubernetesBackend(Backend):
    name = "kubernetes"

    def __init__(
        self, kubeconfig: str | None = None, context: str | None = None, api: Api | None = None
    ) -> None:
        self.kubeconfig, self.context = kubeconfig, context
        self._api = api

    @property
    def api(self) -> Api:
        """The API, connected the kubectl way on first use (ClusterError without a
        usable kubeconfig)."""
        if self._api is None:
            # Imported here: the kubernetes client costs ~0.5 s, which a render or a
            # client-side dry run never pays.
            from .api import Api, connect

            self._api = Api(connect(self.kubeconfig, self.context), say=self.say)
        return self._api

    def lookup(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A Trainer v2 runtime, Secret or ConfigMap of the cluster (None: it has none):
        what a local run of a job borrows from the cluster of --context."""
        trainer, core = f"/apis/{tj.API_VERSION}", f"/api/v1/namespaces/{namespace}"
        paths = {
            "ClusterTrainingRuntime": f"{trainer}/clustertrainingruntimes/{name}",
            "TrainingRuntime": f"{trainer}/namespaces/{namespace}/trainingruntimes/{name}",
            "Secret": f"{core}/secrets/{name}",
            "ConfigMap": f"{core}/configmaps/{name}",
        }
        try:
            return self.api.read_path(f"get {kind} {name}", paths[kind])
        except ClusterError as exc:
            if exc.code == 404:
                return None
            raise

    def check(self, manifest: Mapping[str, Any]) -> list[Finding]:
        """The CRD, namespace, RBAC, Secrets, ServiceAccount and GPU nodes (preflight.py)."""
        from .preflight import preflight

        return preflight(self.api, manifest)

    def submit(
        self, manifest: Mapping[str, Any], *, dry_run: bool = False, force: bool = False
    ) -> Submitted:
        """Server-side apply. A job still being deleted is waited for (an apply would only
        patch the dying object); a finished one is replaced: deleted in the foreground,
        waited for, applied anew (the operators never run a finished job again)."""
        meta = manifest["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        kind = kind_of(manifest)
        before = self.api.find(namespace, name, (kind,))
        state = job_state_words(before)
        going = before is not None and terminating(before)
        replaced = before is not None and finished(before) and not going
        first = (
            "apply waits for it to go, then creates it anew" if going
            else "apply replaces it: deletes it (its pods first), then creates it anew"
        )  # fmt: skip
        if dry_run:
            result = self.api.apply(manifest, dry_run=True, force=force)
            note = f"{state}: {first}" if going or replaced else None
            return Submitted(None, "checked", result, dry_run=True, note=note)
        if replaced:
            self.say(f"{state}: replacing it (deleting it and its pods first)")
            self._delete_and_wait(kind, namespace, name, grace_of(manifest))
            before = None
        elif going:
            assert before is not None
            self.say(f"{state}: waiting for it to go before applying")
            self._wait_gone(kind, namespace, name, grace_of(before))
            before = None
        result = self.api.apply(manifest, force=force)
        verb = (
            "created" if before is None
            else "configured" if apply_changed(before, result) else "unchanged"
        )  # fmt: skip
        return Submitted(self._view(result, []), "replaced" if replaced else verb, result)

    def _delete_and_wait(self, kind: Kind, namespace: str, name: str, grace: int) -> None:
        try:
            self.api.delete(kind, namespace, name)
        except ClusterError as exc:
            if exc.code != 404:  # gone already (a retried delete that had worked)
                raise
        self._wait_gone(kind, namespace, name, grace)

    def _wait_gone(self, kind: Kind, namespace: str, name: str, grace: int) -> None:
        """Until the job and its pods are gone: the pods get `grace` seconds after SIGTERM,
        the garbage collector a minute more; ClusterError past that, saying what still
        holds it. The pods are waited for too: a real cluster's garbage collector can let
        the job go first (seen with training-operator v1.9 and Kubernetes 1.36, whose
        operator even makes a pod again while its job is being deleted)."""
        deadline = time.monotonic() + grace + GONE_MARGIN
        said = 0.0
        while True:
            obj = self.api.find(namespace, name, (kind,))
            pods = self._pods_or([], kind, namespace, name)
            if obj is None and not pods:
                return
            now = time.monotonic()
            if now > deadline:
                raise ClusterError(
                    f"{kind.short}/{name} is still terminating after {grace + GONE_MARGIN:.0f}s "
                    f"({holding(obj, pods)}); kubectl get {kind.plural} {name} -o yaml and "
                    f"kubectl get pods -l {kind.job_label}={name} show what holds it"
                )
            if now - said >= 10:
                self.say(f"{kind.short}/{name} terminating: {holding(obj, pods)}")
                said = now
            time.sleep(1)

    def get(self, namespace: str, name: str) -> JobView | None:
        obj = self.api.find(namespace, name)
        if obj is None:
            return None
        pods = self.api.pods(kind_of(obj), namespace, name)
        problems = self._job_warnings(obj, pods)
        return self._view(obj, pods, raw={**obj, "pods": pods}, problems=problems)

    def list(self, namespace: str | None = None) -> list[JobView]:
        jobs = self.api.list_jobs(namespace)
        pods_of = {
            kind.kind: self.api.pods_by_job(kind, namespace)
            for kind in KINDS
            if any(j["kind"] == kind.kind for j in jobs)
        }
        views = [
            self._view(
                j,
                pods_of[j["kind"]].get(
                    (j["metadata"].get("namespace", ""), j["metadata"]["name"]), []
                ),
            )
            for j in jobs
        ]
        return sorted(views, key=lambda v: (v.namespace, v.name))

    def _view(
        self,
        obj: Mapping[str, Any],
        pods: Pods,
        raw: Mapping[str, Any] | None = None,
        warnings: Warnings | None = None,
        problems: tuple[str, ...] = (),
    ) -> JobView:
        """The job and its pods; `warnings` (by pod) join the pods' problems, `problems`
        are the job's own."""
        meta = obj["metadata"]
        kind = kind_of(obj)
        conditions = conditions_of(obj)
        state = lc.state_of(obj)
        status = obj.get("status", {})
        # A TrainJob's status has no times: its age counts from its creation, to its
        # final condition.
        times: tuple[str | None, str | None] = (None, None)
        if kind is TRAINJOB:
            final = conditions[-1].time if state in lc.FINISHED and conditions else None
            times = (meta.get("creationTimestamp"), final)
        if conditions and conditions[-1].holds:
            message = conditions[-1].message
        elif state == lc.RUNNING:
            message = f"{kind.kind} {meta['name']} is running."
        else:
            message = f"waiting for the {OPERATORS[kind.kind]}"
        return JobView(
            backend=self.name,
            name=meta["name"],
            namespace=meta.get("namespace", "default"),
            state=state,
            message=message,
            conditions=conditions,
            replicas=tuple(
                replica_of(kind, meta["name"], p, (warnings or {}).get(p["metadata"]["name"], ()))
                for p in pods
            ),
            nodes=replica_count(obj),
            created=epoch(meta.get("creationTimestamp")),
            started=epoch(status.get("startTime", times[0])),
            completed=epoch(status.get("completionTime", times[1])),
            storage=StorageLocation.of(obj),
            ended=state in lc.FINISHED,
            raw=obj if raw is None else raw,
            kind=kind.kind,
            problems=problems,
        )

    def watch(
        self, namespace: str, name: str, *, heartbeat: float = 1.0
    ) -> Generator[Event, None, None]:
        """A thread follows the job's watch (which wakes only when the job changes); this
        generator lists the pods every PODS_EVERY seconds beside it, for stuck-pod
        reasons, the pods' Warning events and the newest progress line."""
        kind = self._kind(namespace, name)
        updates: queue.Queue[Any] = queue.Queue()
        done = threading.Event()

        def pump() -> None:
            try:
                for obj in self.api.watch_job(kind, namespace, name, finished):
                    updates.put(obj)
                    if done.is_set():
                        return
            except Exception as exc:  # handed to the generator, which raises it
                updates.put(exc)

        threading.Thread(target=pump, name=f"watch-{name}", daemon=True).start()
        obj: dict[str, Any] | None = None
        pods: Pods = []
        warnings: Warnings = {}
        problems: tuple[str, ...] = ()
        seen: set[Any] = set()
        progress: Progress | None = None
        listed = 0.0
        try:
            while True:
                try:
                    item = updates.get(timeout=heartbeat)
                except queue.Empty:
                    item = None
                if isinstance(item, ClusterError) and item.code == 404:
                    raise JobNotFound(f"{kind.short}/{name} was deleted") from None
                if isinstance(item, Exception):
                    raise item
                if item is not None:
                    if obj is None:
                        yield JobChanged(self._view(item, pods))
                    obj = item
                if obj is None:
                    continue
                now = time.monotonic()
                if finished(obj) or now - listed >= (PODS_EVERY if pods else 0.5):
                    pods, listed = self._pods_or(pods, kind, namespace, name), now
                    warnings = self._warnings(namespace, pods)
                    problems = self._job_warnings(obj, pods)
                    found = self._progress(kind, namespace, pods)
                    if found is not None and found != progress:
                        progress = found
                        yield ProgressReport(found)
                view = self._view(obj, pods, warnings=warnings, problems=problems)
                yield from new_events(view, seen)
                yield JobChanged(view)
                if view.ended:
                    return
        finally:
            done.set()

    def image_pulls(self, view: JobView) -> dict[str, float]:
        pods = view.raw.get("pods") or []
        try:
            events = self.api.pulled(view.namespace)
        except ClusterError:
            return {}  # the account goes without: the pull stays in container_start
        return image_pull_seconds(events, pods)

    def _kind(self, namespace: str, name: str) -> Kind:
        """Which kind the job of that name is (JobNotFound when there is none)."""
        obj = self.api.find(namespace, name)
        if obj is None:
            raise JobNotFound(self.missing(namespace, name))
        return kind_of(obj)

    def _pods_or(self, pods: Pods, kind: Kind, namespace: str, name: str) -> Pods:
        try:
            return self.api.pods(kind, namespace, name)
        except ClusterError:
            return pods  # a hiccup of the API: the next round tries again

    def _warnings(self, namespace: str, pods: Pods) -> Warnings:
        """For a Pending pod with nothing in its status yet: the scheduler's and kubelet's
        warnings (FailedScheduling, FailedMount, ...) from its events, by pod."""
        found = {}
        for pod in pods:
            if pod_problems(pod) or pod_phase(pod) != "Pending":
                continue
            meta = pod["metadata"]
            with contextlib.suppress(ClusterError):
                found[meta["name"]] = self.api.warnings(
                    namespace, meta["name"], uid=meta.get("uid")
                )
        return found

    def _job_warnings(self, obj: Mapping[str, Any], pods: Pods) -> tuple[str, ...]:
        """While the job has fewer pods than it asks for: the operator's Warning events on
        the job (FailedCreatePod: admission refused a pod, a quota is spent), newest last,
        each once."""
        if len(pods) >= replica_count(obj) or lc.state_of(obj) in lc.FINISHED:
            return ()
        meta = obj["metadata"]
        try:
            lines = self.api.warnings(
                meta.get("namespace", "default"), meta["name"], obj["kind"], meta.get("uid")
            )
        except ClusterError:
            return ()
        return tuple(dict.fromkeys(lines))[-3:]

    def _progress(self, kind: Kind, namespace: str, pods: Pods) -> Progress | None:
        """The newest progress line in the last lines of the first running replica."""
        running = [p["metadata"]["name"] for p in pods if pod_phase(p) == "Running"]
        if not running:
            return None
        try:
            lines = self.api.log_lines(
                namespace, running[0], container=kind.container, follow=False, tail=20
            )
            return Progress.newest(lines)
        except ClusterError:
            return None

    def logs(
        self,
        namespace: str,
        name: str,
        *,
        replica: str | None = None,
        follow: bool = False,
        previous: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        """Waits up to 5 minutes for Pending pods; one thread per pod streams its log
        (and the next container's, after a restart) into one queue."""
        kind = self._kind(namespace, name)
        chosen = self._running_pods(kind, namespace, name, replica)

        def read(r: Replica) -> Iterator[str]:
            return self.api.log_lines(
                namespace, r.name, container=kind.container, follow=follow, previous=previous,
                tail=tail,
            )  # fmt: skip

        if len(chosen) == 1 and not follow:
            (only,) = chosen
            yield from (LogLine(only.tag, text) for text in read(only))
            return
        lines: queue.Queue[LogLine | Exception | None] = queue.Queue()

        def stream(r: Replica) -> None:
            try:
                seen = r.restarts
                while True:
                    for text in read(r):
                        lines.put(LogLine(r.tag, text))
                    if not follow or previous:
                        return
                    restarted = self._next_container(kind, namespace, name, r.name, seen)
                    if restarted is None:
                        return
                    seen = restarted
                    lines.put(LogLine(r.tag, f"--- {r.name} restarted (restart {seen}) ---"))
            except ClusterError as exc:
                lines.put(exc)
            finally:
                lines.put(None)

        for r in chosen:
            threading.Thread(target=stream, args=(r,), name=f"logs-{r.name}", daemon=True).start()
        errors: list[str] = []
        running = len(chosen)
        while running:
            item = lines.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                errors.append(str(item))
            else:
                yield item
        if errors:
            raise ClusterError("; ".join(errors))

    def _running_pods(self, kind: Kind, namespace: str, name: str, replica: str | None) -> Replicas:
        deadline = time.monotonic() + PENDING_LOGS_TIMEOUT
        while True:
            replicas = [replica_of(kind, name, p) for p in self.api.pods(kind, namespace, name)]
            chosen = pick(replicas, replica)
            if chosen and all(r.phase != "Pending" for r in chosen):
                return chosen
            if time.monotonic() > deadline:
                raise ClusterError(f"the pods of {name} are still Pending after 5 minutes")
            time.sleep(2)

    def _next_container(
        self, kind: Kind, namespace: str, name: str, pod: str, seen: int
    ) -> int | None:
        """After a followed log ends: the pod's new restart count once its container has
        restarted, or None when the job has ended or the pod is gone."""
        while True:
            pods = self.api.pods(kind, namespace, name)
            current = {p["metadata"]["name"]: p for p in pods}.get(pod)
            if current is None:
                return None
            job = self.api.find(namespace, name, (kind,))
            if job is None or finished(job):
                return None
            if restarts(current) > seen and pod_phase(current) == "Running":
                return restarts(current)
            if pod_phase(current) in ("Succeeded", "Failed"):
                return None
            time.sleep(2)

    def delete(self, namespace: str, name: str, *, wait: bool = False) -> bool:
        """Foreground deletion: the job goes once its pods are gone. `wait`: until then,
        within its pods' grace period and a minute more (ClusterError past that)."""
        obj = self.api.find(namespace, name)
        if obj is None:
            return False
        kind = kind_of(obj)
        if wait:
            self._delete_and_wait(kind, namespace, name, grace_of(obj))
            return True
        try:
            self.api.delete(kind, namespace, name)
        except ClusterError as exc:
            if exc.code != 404:
                raise
        return True

    def stop(self, namespace: str, name: str, *, force: bool = False) -> bool:
        """A cluster job runs on without its watcher."""
        return False
