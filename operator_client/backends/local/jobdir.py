"""Where a local job lives on disk, so any terminal can see it:
`$KCTL_TRAIN_HOME/local/<namespace>/<name>/` (default `~/.kctl-train`).

    manifest.json     the PyTorchJob or TrainJob being run
    runtime.json      a TrainJob's runtime, as given at submit (absent: the built-in one)
    objects.json      the Secrets and ConfigMaps given at submit (mode 0600)
    status.json       its status (conditions, replica statuses, per-replica detail)
    logs/<pod>.log    each replica's output, across restarts
    pods/<pod>/tmp    each replica's private /tmp (processes)
    pods/<pod>/pod.json, root/   its sandbox's description and assembly point (sandboxes)
    pods/<pod>/termination-log   why the replica last failed (its terminationMessagePath)
    pods/<pod>/exit.json   its last exit status, as its shim (or keeper) recorded it
    pods/<pod>/store-cut   present while the pod is cut off its store (a partition)
    supervisor.lock   held (flock) by the supervisor process while it lives
    supervisor.log    the supervisor's own output
    stop              a stop request (its reason), written before signalling the supervisor
    pods.json         how the replicas run: pod sandboxes or processes, and why (launch.py)
    hosts, resolv.conf   the pods' /etc/hosts and /etc/resolv.conf (sandboxes)
    chaos/*.json      fault requests for the supervisor (`kctl-train chaos`)
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ...contract import PARTITION, SLOW
from ...controlplane import lifecycle as lc
from ...controlplane.workload import Workload, workload_of
from ...errors import BadInput
from ...kubeflow.pod_objects import PodObjects
from ...runstore.documents import Document
from ...runstore.location import home
from ...spec.k8s_names import label_problem, subdomain_problem
from ...untrusted import read_json
from ..types import Fault


def write_json(path: Path, body: Any) -> None:
    """Write JSON beside the target and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class NetworkFault:
    """A partition or slow-down a pod is under (`kctl-train chaos`): written with its
    replica, so that a supervisor taking the job over heals it on time."""

    fault: Fault
    heal_at: float | None  # epoch seconds; None: until `chaos heal`

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self.fault), "healAt": self.heal_at}

    @classmethod
    def from_doc(cls, doc: Document, name: str) -> NetworkFault:
        body = Document(doc.mapping(name), f"{doc.what}: {name}")
        action = body.text("action")
        if action not in (PARTITION, SLOW):
            raise ValueError(f"{body.what}: action {action!r} is not a network fault")
        fault = Fault(
            action,
            body.text("pod"),
            seconds=body.number("seconds") if body.has("seconds") else None,
            delay_ms=body.count("delay_ms"),
            loss_percent=body.number("loss_percent"),
        )
        return cls(fault, body.number("healAt") if body.has("healAt") else None)

    def describe(self) -> str:
        """As `status` shows it among the replica's problems."""
        what = replace(self.fault, seconds=None).describe()
        if self.heal_at is not None:
            what += time.strftime(" until %H:%M:%S", time.localtime(self.heal_at))
        return f"network fault (kctl-train chaos): {what}"


@dataclass(frozen=True)
class LocalReplica:
    """One replica as the supervisor last saw it: its state in the operator's state
    machine (lifecycle.ReplicaState), and where it runs here."""

    state: lc.ReplicaState
    pid: int | None = None
    log: str = ""
    address: str | None = None  # in a pod sandbox: its address and network namespace
    netns: str | None = None
    # When the supervisor made the replica and first started its process (epoch seconds):
    # a pod's creation and its container's first start.
    created: float | None = None
    first_started: float | None = None
    # A network fault in effect on its pod (`kctl-train chaos`), and when it heals.
    fault: NetworkFault | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.state
        body = {
            "name": r.name, "type": r.type, "index": r.index, "phase": r.phase,
            "restarts": r.restarts, "exitCode": r.exit_code, "message": r.message,
            "pid": self.pid, "log": self.log,
        }  # fmt: skip
        if self.address is not None:
            body |= {"address": self.address, "netns": self.netns}
        if self.created is not None:
            body |= {"created": self.created, "firstStarted": self.first_started}
        if self.fault is not None:
            body["fault"] = self.fault.to_json()
        return body

    @classmethod
    def from_doc(cls, doc: Document) -> LocalReplica:
        def optional_count(name: str) -> int | None:
            return doc.count(name) if doc.has(name) else None

        def optional_text(name: str) -> str | None:
            return doc.text(name) if doc.has(name) else None

        def optional_number(name: str) -> float | None:
            return doc.number(name) if doc.has(name) else None

        state = lc.ReplicaState(
            name=doc.text("name"),
            type=doc.text("type"),
            index=doc.count("index"),
            phase=doc.text("phase"),
            restarts=doc.count("restarts"),
            exit_code=optional_count("exitCode"),
            message=optional_text("message"),
        )
        return cls(
            state,
            pid=optional_count("pid"),
            log=doc.text("log") if doc.has("log") else "",
            address=optional_text("address"),
            netns=optional_text("netns"),
            created=optional_number("created"),
            first_started=optional_number("firstStarted"),
            fault=NetworkFault.from_doc(doc, "fault") if doc.has("fault") else None,
        )


@dataclass(frozen=True)
class LocalStatus:
    """The `local` block of status.json: what the supervisor knows beyond the operator's
    status (written by supervisor.py, read by backend.py)."""

    state: str
    message: str
    supervisor_pid: int
    mode: str  # pod sandboxes or processes (launch.py), and why
    why: str
    memory_limits: str
    workdir: str
    counted_restarts: int
    started: float
    completed: float | None
    replicas: tuple[LocalReplica, ...]
    port: int | None = None  # processes: the job's rendezvous port
    # The state machine's own conditions and the groups started: what a supervisor that
    # takes the job over goes on from (the operator's status shows a TrainJob's renamed).
    conditions: tuple[lc.ConditionState, ...] = ()
    started_groups: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "message": self.message,
            "supervisorPid": self.supervisor_pid,
            "mode": self.mode,
            "why": self.why,
            "memoryLimits": self.memory_limits,
            **({"port": self.port} if self.port is not None else {}),
            "workdir": self.workdir,
            "countedRestarts": self.counted_restarts,
            "started": self.started,
            "completed": self.completed,
            "replicas": [r.to_json() for r in self.replicas],
            "conditions": [asdict(c) for c in self.conditions],
            "startedGroups": list(self.started_groups),
        }

    @classmethod
    def from_json(cls, raw: Any) -> LocalStatus:
        """ValueError naming the field for anything but what the supervisor writes."""
        doc = Document(raw, "status.json local")
        return cls(
            state=doc.text("state"),
            message=doc.text("message"),
            supervisor_pid=doc.count("supervisorPid"),
            mode=doc.text("mode"),
            why=doc.text("why"),
            memory_limits=doc.text("memoryLimits"),
            workdir=doc.text("workdir"),
            counted_restarts=doc.count("countedRestarts"),
            started=doc.number("started"),
            completed=doc.number("completed") if doc.has("completed") else None,
            replicas=tuple(LocalReplica.from_doc(r) for r in doc.objects("replicas")),
            port=doc.count("port") if doc.has("port") else None,
            conditions=tuple(
                lc.ConditionState(
                    type=c.text("type"),
                    reason=c.text("reason"),
                    message=c.text("message"),
                    time=c.number("time"),
                    status=c.text("status"),
                )
                for c in (doc.objects("conditions") if doc.has("conditions") else ())
            ),
            started_groups=tuple(doc.texts("startedGroups") if doc.has("startedGroups") else ()),
        )


@dataclass(frozen=True)
class JobDir:
    path: Path

    @classmethod
    def of(cls, namespace: str, name: str, root: Path | None = None) -> JobDir:
        """The directory of job `namespace/name`. BadInput for a name the API server would
        refuse: only a valid name is one component of a path under the root."""
        problem = label_problem(namespace, "namespace") or subdomain_problem(name, "job name")
        if problem:
            raise BadInput(problem)
        return cls((root or home()) / "local" / namespace / name)

    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.json"

    @property
    def runtime_file(self) -> Path:
        return self.path / "runtime.json"

    @property
    def objects_file(self) -> Path:
        return self.path / "objects.json"

    def objects(self) -> PodObjects:
        """The Secrets and ConfigMaps given at submit (none: an empty set)."""
        try:
            return PodObjects.from_json(read_json(self.objects_file))
        except FileNotFoundError:
            return PodObjects()

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def lock_file(self) -> Path:
        return self.path / "supervisor.lock"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def stop_file(self) -> Path:
        return self.path / "stop"

    @property
    def pods_file(self) -> Path:
        return self.path / "pods.json"

    @property
    def chaos_dir(self) -> Path:
        return self.path / "chaos"

    def log(self, pod: str) -> Path:
        return self.path / "logs" / f"{pod}.log"

    def pod_dir(self, pod: str) -> Path:
        return self.path / "pods" / pod

    def tmp(self, pod: str) -> Path:
        """A replica's TMPDIR when it runs as processes."""
        return self.pod_dir(pod) / "tmp"

    def empty_dirs(self, pod: str) -> Path:
        """Where a pod sandbox's emptyDirs are mounted (sandbox/empty_dirs.py)."""
        return self.pod_dir(pod) / "empty-dirs"

    def termination_log(self, pod: str) -> Path:
        """The replica's terminationMessagePath: why it last failed, in its own words."""
        return self.pod_dir(pod) / "termination-log"

    def exit_record(self, pod: str) -> Path:
        """Where the pod's shim records its exit status (sandbox/exit_record.py)."""
        return self.pod_dir(pod) / "exit.json"

    def store_cut(self, pod: str) -> Path:
        """Present while the pod is cut off its store (a partition): its shim's relay
        refuses then (sandbox/relay.py)."""
        return self.pod_dir(pod) / "store-cut"

    def exists(self) -> bool:
        return self.manifest_file.is_file()

    def manifest(self) -> dict[str, Any]:
        body: dict[str, Any] = read_json(self.manifest_file)
        return body

    def workload(self, manifest: Mapping[str, Any] | None = None) -> Workload:
        """The job's pods, built from its manifest (`manifest`: read already) and its
        TrainJob's runtime."""
        manifest = self.manifest() if manifest is None else manifest
        try:
            runtime = read_json(self.runtime_file)
        except FileNotFoundError:
            return workload_of(manifest)
        return workload_of(manifest, {runtime["metadata"]["name"]: runtime})

    def status(self) -> dict[str, Any]:
        """The last status the supervisor wrote ({} before its first write, or when it is
        not a JSON object)."""
        try:
            body = read_json(self.status_file)
        except (FileNotFoundError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def local_status(self, body: dict[str, Any] | None = None) -> LocalStatus | None:
        """The `local` block of the status (None before the supervisor's first write);
        ValueError when it is not what a supervisor writes."""
        body = self.status() if body is None else body
        return LocalStatus.from_json(body["local"]) if "local" in body else None

    def supervisor_alive(self) -> bool:
        """Whether a supervisor holds this job's lock (robust to PID reuse)."""
        try:
            fd = os.open(self.lock_file, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def hold_lock(self) -> int:
        """Take the supervisor lock for the life of this process; returns its fd."""
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return fd

    def supervisor_pid(self) -> int | None:
        try:
            return int(self.lock_file.read_text().strip() or "0") or None
        except (FileNotFoundError, ValueError):
            return None
