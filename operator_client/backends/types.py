"""The shapes every backend returns (the contract in base.py), so a job looks the same
whichever backend runs it: a job's view with its replicas and conditions, a watch's events,
log lines, preflight findings, faults to rehearse, where a run's objects are stored.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
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
from ..controlplane import lifecycle as lc


@dataclass(frozen=True)
class Finding:
    """One result of a preflight check. `level` "error" stops a submit, "warning" is
    shown, "info" says how the job would run (`doctor`); `bad_input`: the job itself
    cannot run on this backend (exit code 2), not the place it would run."""

    level: str
    message: str
    bad_input: bool = False


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
    note: str | None = None  # what a submit did (a dry run's: would do) beyond its verb
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
