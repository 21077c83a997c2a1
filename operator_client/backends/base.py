"""The backend contract: what runs a rendered PyTorchJob or TrainJob somewhere, in one
interface.

Every backend (local processes, a Kubernetes cluster) implements `Backend`; the client,
the CLI and the TorchX scheduler use nothing else. The shapes it returns (`JobView`,
`Event`, `LogLine`) are shared, so a job looks the same whichever backend runs it.
tests/test_backend_conformance.py holds every backend to these docstrings.
"""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlsplit

from ..contract import (
    ENDPOINT_ANNOTATION,
    HEAL,
    KILL,
    PARTITION,
    REGION_ANNOTATION,
    RUN_ROOT_ANNOTATION,
    SLOW,
    Progress,
)
from ..errors import BackendError, BadInput, NoStorage
from ..kubeflow import lifecycle as lc
from ..kubeflow.workload import Workload, WorkloadError, workload_of
from ..storage import ObjectStore, open_store

if TYPE_CHECKING:
    from ..spec.model import TrainingJob


@dataclass(frozen=True)
class Finding:
    """One result of a preflight check. `level` "error" stops a submit, "warning" is
    shown, "info" says how the job would run (`doctor`); `bad_input`: the job itself
    cannot run on this backend (exit code 2), not the place it would run."""

    level: str
    message: str
    bad_input: bool = False


@dataclass(frozen=True)
class ImageRoot:
    """An image's root filesystem to run the replicas from (None: this machine's root,
    with the installed package standing in for the image), with the image's config:
    what a local backend runs a built image from (Backend.use_image)."""

    path: str
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"


@dataclass(frozen=True)
class Condition:
    """A job condition, as the operator writes them."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    time: str | None = None  # RFC 3339

    @property
    def holds(self) -> bool:
        return self.status == "True"


@dataclass(frozen=True)
class Replica:
    """One replica (a pod on a cluster, a process group locally)."""

    name: str  # the pod's name: quickstart-master-0
    tag: str  # its name in the job: master-0
    phase: str  # Pending, Running, Succeeded, Failed (Terminating while deleted)
    restarts: int = 0
    exit_code: int | None = None  # of its last run, when it ended
    problems: tuple[str, ...] = ()  # why it is stuck or failed, one line each
    node: str = "-"  # where it runs: a node's name, or this machine and the pid
    # Epoch seconds, where known: the pod made, bound to a node, its container's first
    # start (the goodput account splits a rank's time before its process by them).
    created: float | None = None
    scheduled: float | None = None
    started: float | None = None


@dataclass(frozen=True)
class StorageLocation:
    """Where a run's objects are: its run root and the S3 endpoint and region, if any."""

    root: str
    endpoint: str | None = None
    region: str | None = None

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> StorageLocation | None:
        """From a rendered job's annotations (None: rendered without storage, or
        annotations that `problem` refuses: nothing follows them)."""
        annotations = manifest.get("metadata", {}).get("annotations") or {}
        root = annotations.get(RUN_ROOT_ANNOTATION)
        if not root or cls.problem(manifest):
            return None
        return cls(root, annotations.get(ENDPOINT_ANNOTATION), annotations.get(REGION_ANNOTATION))

    @staticmethod
    def problem(manifest: Mapping[str, Any]) -> str | None:
        """Why the job's storage annotations cannot be followed (None: they can). A run
        root is only ever `<store>/<namespace>/<name>/` of this job's own names, in its
        normal form, so an annotation written by hand never aliases another run's root."""
        meta = manifest.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        root = annotations.get(RUN_ROOT_ANNOTATION)
        if not root:
            return None
        namespace, name = meta.get("namespace", "default"), meta.get("name", "")
        parts = urlsplit(str(root))
        suffix = f"/{namespace}/{name}/"
        path = unquote(parts.path)
        normal = posixpath.normpath(path) + "/" == path and "%" not in parts.path
        if (
            parts.scheme not in ("s3", "file")
            or parts.query
            or parts.fragment
            or not normal
            or not path.endswith(suffix)
        ):
            return (
                f"annotation {RUN_ROOT_ANNOTATION}={root!r} is not <store>{suffix} in normal "
                "form: a job's run root is derived from its own namespace and name (render "
                "the job with kctl-train, or remove the annotation)"
            )
        endpoint = annotations.get(ENDPOINT_ANNOTATION)
        if endpoint and (urlsplit(str(endpoint)).query or "@" in str(endpoint)):
            return (
                f"annotation {ENDPOINT_ANNOTATION}={endpoint!r}: an endpoint is scheme://host:port "
                "with no credentials or query"
            )
        return None


@dataclass(frozen=True)
class JobView:
    """A job as every backend shows it."""

    backend: str
    name: str
    namespace: str
    state: str  # lifecycle.state_of: a condition type, Pending or Unknown
    message: str  # why it is in that state (the newest condition's message)
    conditions: tuple[Condition, ...] = ()
    replicas: tuple[Replica, ...] = ()
    nodes: int = 0  # replicas the job asks for
    created: float | None = None  # epoch seconds
    started: float | None = None
    completed: float | None = None
    storage: StorageLocation | None = None
    # Nothing more will happen to it: it succeeded or failed (locally also: stopped, or
    # lost with its supervisor). A suspended cluster job waits to be resumed (Kueue).
    ended: bool = False
    runs_as: str = ""  # how the backend runs the replicas, where it has a choice
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)  # for -o yaml|json
    kind: str = "PyTorchJob"  # or TrainJob
    # Why pods the job asks for do not exist, one line each: the operator's Warning events
    # on the job (admission refused a pod, a quota is spent), while pods are missing.
    problems: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.state == lc.SUCCEEDED

    @property
    def restarts(self) -> int:
        return sum(r.restarts for r in self.replicas)


@dataclass(frozen=True)
class Submitted:
    """What a submit did: `verb` created, configured, unchanged (or checked, for a dry
    run); `object` the job as the backend now has it (would have it)."""

    view: JobView | None
    verb: str
    object: Mapping[str, Any]
    dry_run: bool = False
    how: str = "server-side"  # how it was submitted, for people: server-side, local
    resume_step: int | None = None  # the committed checkpoint the run resumes from
    logs_at: str | None = None  # where the replicas' logs can be read directly
    note: str | None = None  # what a dry run found a real submit would do first
    # A local server dry run: the Pods it would start, as the API server would hold them.
    pods: list[dict[str, Any]] | None = None


# Events of a watch.


@dataclass(frozen=True)
class JobChanged:
    """The job now looks like this (also sent every heartbeat, changed or not)."""

    view: JobView


@dataclass(frozen=True)
class ConditionReached:
    """A condition began to hold (sent once per type, reason and message)."""

    condition: Condition


@dataclass(frozen=True)
class ReplicaNote:
    """A new line on why a replica is stuck or failed (sent once per text)."""

    pod: str  # the replica's pod name: quickstart-master-0
    text: str


@dataclass(frozen=True)
class ProgressReport:
    """Training moved on (parsed from the progress lines of the replicas' logs)."""

    progress: Progress


Event = JobChanged | ConditionReached | ReplicaNote | ProgressReport


@dataclass(frozen=True)
class LogLine:
    """One line of a replica's log."""

    tag: str  # the replica's name in the job: master-0
    text: str


@dataclass(frozen=True)
class Fault:
    """A fault to inject into one replica, to rehearse failures (Backend.inject)."""

    action: str  # one of contract.FAULTS
    pod: str  # the replica's pod name: quickstart-worker-0
    seconds: float | None = None  # partition, slow: heal after this long (None: until healed)
    delay_ms: int = 200
    loss_percent: float = 0.0

    def describe(self) -> str:
        what = {
            KILL: "killed (SIGKILL to every process)",
            PARTITION: "cut off the network",
            SLOW: f"slowed ({self.delay_ms} ms latency, {self.loss_percent:g}% loss)",
            HEAL: "network restored",
        }[self.action]
        return what + (f" for {self.seconds:g}s" if self.seconds else "")


@dataclass(frozen=True)
class BackendInfo:
    """A backend as the client's callers see it (the backend itself stays the client's)."""

    name: str  # "local" or "kubernetes"
    # This machine reads the run's store as the job writes it (apply --wait collects).
    store_reachable: bool
    # A built image runs from this machine's image storage (not pulled by reference).
    local_images: bool


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


def replica_count(manifest: Mapping[str, Any], workload: Workload | None = None) -> int:
    """How many nodes a job asks for: a PyTorchJob's replicas, a TrainJob's trainer pods
    (kubeflow/workload.py builds both; `workload` when the caller has it). A TrainJob of
    a runtime only its cluster has: numNodes, else 1 (what every stock runtime sets)."""
    if workload is None:
        try:
            workload = workload_of(manifest)
        except (WorkloadError, KeyError, TypeError, ValueError):
            trainer = (manifest.get("spec") or {}).get("trainer") or {}
            return int(trainer.get("numNodes") or 1)
    return workload.main.count if workload.trainjob else workload.count


def conditions_of(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    """`status.conditions` as Conditions (entries of another shape are passed over)."""
    status = obj.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason", "")),
            message=str(c.get("message", "")),
            time=c.get("lastTransitionTime"),
        )
        for c in (found if isinstance(found, list) else [])
        if isinstance(c, Mapping)
    )


def pick(replicas: Sequence[Replica], tag: str | None) -> list[Replica]:
    """The replicas a `replica` argument names (None or "all": every one)."""
    if tag in (None, "all"):
        return list(replicas)
    chosen = [r for r in replicas if r.tag == tag]
    if not chosen and replicas:
        raise BadInput(f"no replica {tag!r}; the job has {', '.join(r.tag for r in replicas)}")
    return chosen


def new_events(view: JobView, seen: set[Any]) -> Iterator[Event]:
    """The ConditionReached and ReplicaNote events of `view` not in `seen` (which
    remembers them): the part of a watch every backend shares."""
    for cond in view.conditions:
        key = ("condition", cond.type, cond.reason, cond.message)
        if cond.holds and key not in seen:
            seen.add(key)
            yield ConditionReached(cond)
    notes = [(view.name, text) for text in view.problems]
    notes += [(r.name, text) for r in view.replicas for text in r.problems]
    for who, text in notes:
        if (who, text) not in seen:
            seen.add((who, text))
            yield ReplicaNote(who, text)
