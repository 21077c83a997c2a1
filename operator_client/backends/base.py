"""The backend contract: what runs a rendered PyTorchJob or TrainJob somewhere, in one
interface.

Every backend (local processes, a Kubernetes cluster) implements `Backend`; the client,
the CLI and the TorchX scheduler use nothing else. The shapes it returns (`JobView`,
`Event`, `LogLine`: types.py) are shared, so a job looks the same whichever backend runs
it; views.py holds what the backends share in making them.
tests/test_backend_conformance.py holds every backend to these docstrings.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..contract import (
    RUN_ROOT_ANNOTATION,
    ImageRoot,
)
from ..errors import BackendError, BadInput, NoStorage
from ..storage import ObjectStore, open_store
from .types import (
    BackendInfo,
    Event,
    Fault,
    Finding,
    JobView,
    LogLine,
    Submitted,
)

if TYPE_CHECKING:
    from ..spec.model import TrainingJob


class Backend(abc.ABC):
    """Runs rendered PyTorchJobs and TrainJobs. Jobs are named by (namespace, name): one
    name is one job, of either kind.

    `name` is what the user picks the backend by (`Client(backend=...)`).
    """

    name: ClassVar[str]
    # Whether this machine reads the run's store as the job writes it (then `apply
    # --wait` collects by default; a cluster's pods may use an in-cluster endpoint).
    store_reachable: ClassVar[bool] = False
    # Whether a built image runs from this machine's image storage (use_image) rather
    # than being pulled from its registry by reference.
    local_images: ClassVar[bool] = False

    _listener: Callable[[str], None] | None = None

    def info(self) -> BackendInfo:
        """What callers of the client may know of the backend."""
        return BackendInfo(self.name, self.store_reachable, self.local_images)

    def listen(self, listener: Callable[[str], None] | None) -> None:
        """Where the backend says what a long operation waits for (a job terminating
        before an apply, a delete waiting for pods): nowhere by default."""
        self._listener = listener

    def say(self, line: str) -> None:
        if self._listener is not None:
            self._listener(line)

    def prepare(
        self, job: TrainingJob, storage: str | None = None
    ) -> tuple[TrainingJob, str | None]:
        """1. The job as this backend runs it, and a warning when that differs from the
        spec. `storage` (a store URI) replaces the spec's store where the backend lets the
        user choose one. Pure of side effects on the job's state; the default changes
        nothing and refuses `storage`."""
        if storage is not None:
            raise BadInput(f"--storage: the {self.name} backend stores where the spec says")
        return job, None

    @abc.abstractmethod
    def check(self, manifest: Mapping[str, Any]) -> list[Finding]:
        """2. Everything checkable before a submit, errors first; changes nothing.
        A finding at level "error" means submit would fail or the job could never run."""

    @abc.abstractmethod
    def submit(
        self, manifest: Mapping[str, Any], *, dry_run: bool = False, force: bool = False
    ) -> Submitted:
        """3. Start the job, or update it in place (server-side apply on a cluster).
        Idempotent: submitting an unchanged manifest again changes nothing ("unchanged")
        while the job runs. A finished job of the same name is replaced ("replaced": its
        record, not its stored checkpoints: the new run resumes from them); one still
        being deleted is waited for, within a bound. `dry_run`: validate as far as the
        backend can, start nothing (Submitted.note says what a real submit would do).
        `force`: take over fields another manager owns. Errors: BadInput (this job cannot
        run here), BackendError (the backend cannot take it now)."""

    @abc.abstractmethod
    def get(self, namespace: str, name: str) -> JobView | None:
        """4. The job as it is now, or None when there is none."""

    @abc.abstractmethod
    def list(self, namespace: str | None = None) -> list[JobView]:
        """5. Every job of a namespace (None: of all), ordered by namespace and name."""

    @abc.abstractmethod
    def watch(
        self, namespace: str, name: str, *, heartbeat: float = 1.0
    ) -> Generator[Event, None, None]:
        """6. The job's life as events, until it has ended. The first event is a
        JobChanged; then a JobChanged at least every `heartbeat` seconds and on every
        change, a ConditionReached once for each condition that begins to hold, a
        ReplicaNote once for each new reason a replica is stuck or failed, a
        ProgressReport when training moves on. The last event is a JobChanged whose view
        has ended. JobNotFound when the job is (or goes) away. Closing the iterator
        stops any work it started."""

    @abc.abstractmethod
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
        """7. The replicas' log lines: all replicas, or one by tag (BadInput naming the
        tags when there is no such replica). `follow`: keep reading until the job ends,
        across container restarts (a line `--- POD restarted (restart N) ---` marks
        each). `previous`: the log of the container before the last restart, where
        the backend keeps it apart. `tail`: only the last lines of each replica."""

    @abc.abstractmethod
    def delete(self, namespace: str, name: str, *, wait: bool = False) -> bool:
        """8. Stop the job and remove its record; its stored objects stay. False when
        there was no such job. `wait`: return once its replicas are gone."""

    @abc.abstractmethod
    def stop(self, namespace: str, name: str, *, force: bool = False) -> bool:
        """9. What an interrupted wait does to the job: stop it gracefully (its
        replicas commit an emergency checkpoint) or, with force, at once. False when
        the backend leaves a job running when its watcher goes (a cluster)."""

    def inject(self, namespace: str, name: str, fault: Fault) -> str:
        """10. Inject `fault` into one replica of a running job; what was done.
        BackendError where this backend cannot (the default)."""
        raise BackendError(f"fault injection is not available on the {self.name} backend")

    def use_image(self, root: ImageRoot) -> None:
        """11. Run the next submitted job's replicas from this built image's root
        filesystem (`kctl-train apply --build`); only where `local_images` (a cluster
        pulls the job's image by its reference instead)."""
        raise BackendError(f"the {self.name} backend pulls images; it runs none from here")

    def missing(self, namespace: str, name: str) -> str:
        """The message for a job that is not there (JobNotFound)."""
        return f"job {name} not found in namespace {namespace} (no PyTorchJob or TrainJob)"

    def store_of(
        self, view: JobView, *, endpoint: str | None = None, concurrency: int = 16
    ) -> ObjectStore:
        """12. The store holding the run's objects, for collect. `endpoint` replaces the
        job's S3 endpoint (the pods' may be in-cluster, unreachable from here).
        NoStorage when the job was rendered without storage."""
        where = view.storage
        if where is None:
            raise NoStorage(
                f"{view.kind.lower()}/{view.name} has no {RUN_ROOT_ANNOTATION} annotation: it "
                "was not rendered by kctl-train with storage (use --from STORAGE_URI)"
            )
        return open_store(
            where.root,
            endpoint=endpoint or where.endpoint,
            region=where.region,
            concurrency=concurrency,
        )

    def image_pulls(self, view: JobView) -> dict[str, float]:
        """13. Seconds each of the job's pods waited for its images, by pod name, where
        the backend knows (the goodput account's image pull); none pulled here by
        default (the local backend's image is on this machine before a pod starts)."""
        return {}
