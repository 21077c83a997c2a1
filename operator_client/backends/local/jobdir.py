"""Where a local job lives on disk, so any terminal can see it:
`$KCTL_TRAIN_HOME/local/<namespace>/<name>/` (default `~/.kctl-train`).

    manifest.json     the PyTorchJob being run
    status.json       its status (conditions, replica statuses, per-replica detail)
    logs/<pod>.log    each replica's output, across restarts
    pods/<pod>/tmp    each replica's private /tmp (processes)
    pods/<pod>/pod.json, root/   its sandbox's description and assembly point (sandboxes)
    pods/<pod>/termination-log   why the replica last failed (its terminationMessagePath)
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...runstore.location import home


def write_json(path: Path, body: Any) -> None:
    """Write JSON beside the target and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class JobDir:
    path: Path

    @classmethod
    def of(cls, namespace: str, name: str, root: Path | None = None) -> JobDir:
        return cls((root or home()) / "local" / namespace / name)

    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.json"

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
        return self.pod_dir(pod) / "tmp"

    def termination_log(self, pod: str) -> Path:
        """The replica's terminationMessagePath: why it last failed, in its own words."""
        return self.pod_dir(pod) / "termination-log"

    def exists(self) -> bool:
        return self.manifest_file.is_file()

    def manifest(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.manifest_file.read_text())
        return body

    def status(self) -> dict[str, Any]:
        """The last status the supervisor wrote ({} before its first write)."""
        try:
            body: dict[str, Any] = json.loads(self.status_file.read_text())
            return body
        except FileNotFoundError:
            return {}

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
