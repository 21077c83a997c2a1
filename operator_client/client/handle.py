"""A handle on one job: its status, the wait for its end, its logs, its results."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend
from ..backends.types import Event, Fault, Finding, JobChanged, JobView, LogLine, Submitted
from ..collect.results import Collected, collect_run, results_dir
from ..contract import FAULTS
from ..errors import BadInput, JobNotFound, WaitTimeout
from ..kubeflow.kinds import kind_of
from ..runstore import checkpoint_log, events
from ..runstore.checkpoint_log import SaveBudget
from ..runstore.goodput import Account, PodTimes, account
from ..spec.document import NotRenderedError, job_of
from .collecting import consolidate_with_torch
from .failure import FailureReport, failure_report


def pod_times(view: JobView, pulls: Mapping[str, float]) -> list[PodTimes]:
    """The job's pods as the backend saw them made, bound, pulling images and started."""
    return [
        PodTimes(r.name, r.created, r.scheduled, r.started, pulls.get(r.name))
        for r in view.replicas
    ]


if TYPE_CHECKING:
    from ..spec import SpecIssue
    from ..spec.model import TrainingJob
    from ..spec.save_estimate import SaveEstimate


@dataclass
class JobHandle:
    """A job of a backend, by name. `apply` fills in what it rendered and did."""

    _backend: Backend
    name: str
    namespace: str
    manifest: Mapping[str, Any] | None = None  # as rendered (apply only)
    submitted: Submitted | None = None  # None: not submitted (dry run client, or get)
    warnings: list[SpecIssue] = field(default_factory=list)  # from the job's spec
    findings: list[Finding] = field(default_factory=list)  # preflight warnings
    note: str | None = None  # how the backend changed the job (its store, locally)
    found: JobView | None = None  # the view Client.job() read to find the job

    def status(self) -> JobView:
        """The job as it is now (JobNotFound when it is gone)."""
        view = self._backend.get(self.namespace, self.name)
        if view is None:
            raise JobNotFound(self._backend.missing(self.namespace, self.name))
        return view

    def events(self, heartbeat: float = 1.0) -> Generator[Event, None, None]:
        """The job's life as events until it ends (Backend.watch)."""
        return self._backend.watch(self.namespace, self.name, heartbeat=heartbeat)

    def wait(
        self, timeout: float | None = None, on_event: Callable[[Event], None] | None = None
    ) -> JobView:
        """Follow the job until it ends; its final view (check `.succeeded`). Each event
        goes to `on_event`. WaitTimeout after `timeout` seconds (the job goes on)."""
        started = time.monotonic()
        final: JobView | None = None
        events = self.events()
        try:
            for event in events:
                if on_event is not None:
                    on_event(event)
                if isinstance(event, JobChanged):
                    final = event.view
                if timeout is not None and time.monotonic() - started > timeout:
                    kind = kind_of(final.kind if final else self.manifest or {})
                    raise WaitTimeout(
                        f"{kind.short}/{self.name} still runs after {timeout:g}s; it goes on"
                    )
        finally:
            events.close()
        assert final is not None  # a watch ends with the ended job's JobChanged
        return final

    def logs(
        self,
        *,
        follow: bool = False,
        replica: str | None = None,
        previous: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        """The replicas' log lines (Backend.logs): `line.tag`, `line.text`."""
        return self._backend.logs(
            self.namespace, self.name, replica=replica, follow=follow, previous=previous, tail=tail
        )

    def failure(self) -> FailureReport | None:
        """Why the job did not succeed (None when it did)."""
        return failure_report(self.status(), self.logs)

    def collect(
        self,
        to: str | Path | None = None,
        *,
        all_checkpoints: bool = False,
        checkpoint: str = "last",
        consolidate: bool = False,
        concurrency: int = 16,
        endpoint: str | None = None,
        progress: Any = None,
    ) -> Collected:
        """Download the run's newest checkpoint (`checkpoint`: `best` by the run's
        checkpoint.monitor, or a step; or all), outputs, metrics and run info,
        verified, into `to` (default results/<name>/), and write the report there.
        `consolidate`: a sharded checkpoint also as one model.ckpt (needs torch).
        `endpoint`: the S3 endpoint to use from here when the pods' is in-cluster."""
        view = self.status()
        store = self._backend.store_of(view, endpoint=endpoint, concurrency=concurrency)
        job = {
            "name": view.name,
            "namespace": view.namespace,
            "state": view.state,
            "started": view.started,
            "completed": view.completed,
        }
        dest = Path(to) if to is not None else results_dir(self.name)
        return collect_run(
            store,
            dest,
            job,
            all_checkpoints=all_checkpoints,
            checkpoint=checkpoint,
            consolidate=consolidate_with_torch if consolidate else None,
            concurrency=concurrency,
            progress=progress,
            pods=pod_times(view, self._backend.image_pulls(view)),
        )

    def goodput(
        self, *, endpoint: str | None = None, view: JobView | None = None
    ) -> Account | None:
        """The goodput account so far, from the events the ranks have written to the
        run's store (None: none yet). NoStorage when the job stores nothing;
        StoreError when the store cannot be read from here (`endpoint` replaces the
        pods' S3 endpoint). `view`: the job as just read (else read now)."""
        view = view or self.status()
        store = self._backend.store_of(view, endpoint=endpoint)
        pods = pod_times(view, self._backend.image_pulls(view))
        return account(events.read_store(store, strict=True), pods)

    def save_budget(
        self, *, endpoint: str | None = None, view: JobView | None = None
    ) -> SaveBudget | None:
        """What an emergency save needs on this run, measured over its saves so far (None:
        none yet). NoStorage, StoreError and `view` as goodput()."""
        store = self._backend.store_of(view or self.status(), endpoint=endpoint)
        return checkpoint_log.budget(checkpoint_log.read(store))

    def save_window(self, view: JobView | None = None) -> int | None:
        """Seconds from SIGTERM to SIGKILL a preempted pod of this job has: its grace
        period, cut to the spot notice on spot nodes (None: not rendered by kctl-train).
        `view` as goodput()."""
        job = self._job(view)
        return None if job is None else job.spec.save_window_seconds

    def save_estimate(self, view: JobView | None = None) -> SaveEstimate | None:
        """What an emergency save needs by estimate, before any save is measured (from
        checkpoint.stateSize; None without one, or not rendered by kctl-train). `view` as
        goodput()."""
        job = self._job(view)
        return None if job is None else job.spec.save_estimate

    def _job(self, view: JobView | None) -> TrainingJob | None:
        try:
            return job_of(dict(self.manifest or (view or self.status()).raw))
        except (NotRenderedError, ValueError, KeyError):
            return None

    def stop(self, *, force: bool = False) -> bool:
        """Stop the job (locally: with an emergency checkpoint; force: at once). False
        where the backend leaves it running (a cluster)."""
        return self._backend.stop(self.namespace, self.name, force=force)

    def inject(
        self,
        action: str,
        replica: str,
        *,
        seconds: float | None = None,
        delay_ms: int = 200,
        loss_percent: float = 0.0,
    ) -> str:
        """Inject a fault into one replica (kill, partition, slow, heal), by its tag
        (worker-0) or pod name, to rehearse a failure; what was done. Local jobs only;
        partition and slow need pod sandboxes."""
        if action not in FAULTS:
            raise BadInput(f"fault {action!r}: use one of {', '.join(FAULTS)}")
        fault = Fault(action, self.pod_of(replica), seconds, delay_ms, loss_percent)
        return self._backend.inject(self.namespace, self.name, fault)

    def pod_of(self, replica: str) -> str:
        """The pod name of a replica given by its tag (worker-0) or pod name; BadInput
        naming the job's replicas for any other."""
        replicas = self.status().replicas
        for r in replicas:
            if replica in (r.name, r.tag):
                return r.name
        known = ", ".join(r.tag for r in replicas)
        raise BadInput(f"no replica {replica!r} in {self.name} (replicas: {known})")

    def delete(self, *, wait: bool = False) -> bool:
        """Stop the job and remove its record; stored checkpoints stay. False: none."""
        return self._backend.delete(self.namespace, self.name, wait=wait)
