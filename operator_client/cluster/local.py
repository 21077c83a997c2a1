"""The local backend: runs a rendered PyTorchJob as processes on this machine.

The image is not pulled: each replica runs the `pytorch` container's command from the
installed package, with the container's env and exactly the operator's additions
(local_env.py). A detached supervisor (supervisor.py) owns the processes; this module
submits, inspects, stops and deletes jobs through their directory (jobdir.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..kubeflow.pod_env import PodEnvError
from . import lifecycle as lc
from . import pod_processes
from .jobdir import JobDir, home, write_json
from .local_env import container_of, replica_command, replica_env

# Each replica is a torchrun agent and its workers on this one machine.
MAX_REPLICAS = 64


class LocalJobError(Exception):
    """A local job cannot be submitted, found or stopped; the message says why and what to do."""


def _names(manifest: Mapping[str, Any]) -> tuple[str, str]:
    meta = manifest["metadata"]
    return meta.get("namespace", "default"), meta["name"]


def state_of(job: JobDir, status: Mapping[str, Any]) -> str:
    """The job's state; Unknown when its supervisor died before the job ended."""
    state = str(status.get("local", {}).get("state", "Pending"))
    if state not in lc.ENDED and not job.supervisor_alive() and status:
        return "Unknown"
    return state


class LocalBackend:
    """Local jobs under `root` (default $KCTL_TRAIN_HOME or ~/.kctl-train)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or home()

    def job(self, namespace: str, name: str) -> JobDir:
        return JobDir.of(namespace, name, self.root)

    def check(self, manifest: Mapping[str, Any], env: Mapping[str, str] = os.environ) -> None:
        """Everything a start needs, before anything starts: commands found, env resolvable."""
        bindir = Path(sys.executable).parent
        count = sum(
            int(spec.get("replicas", 1))
            for spec in manifest["spec"]["pytorchReplicaSpecs"].values()
        )
        if count > MAX_REPLICAS:
            raise LocalJobError(
                f"{count} replicas: the local backend runs every replica on this machine "
                f"and takes at most {MAX_REPLICAS}; run it on a cluster, or lower spec.nodes"
            )
        for replica in lc.replicas_of(manifest):
            try:
                replica_command(container_of(manifest, replica.type), bindir)
                replica_env(manifest, replica, port=0, base=env, tmpdir=Path("/nonexistent"))
            except PodEnvError as exc:
                raise LocalJobError(f"{replica.name}: {exc}") from None

    def submit(self, manifest: Mapping[str, Any], *, replace: bool = True) -> JobDir:
        """Start the job's supervisor. A finished job of the same name is replaced (its
        record, not its stored checkpoints: the new run resumes from them)."""
        namespace, name = _names(manifest)
        job = self.job(namespace, name)
        if job.exists() and job.supervisor_alive():
            raise LocalJobError(
                f"local job {namespace}/{name} is still running; wait for it, or "
                f"`kctl-train delete {name} --local` first"
            )
        if job.exists() and not replace:
            raise LocalJobError(f"local job {namespace}/{name} already exists")
        self.check(manifest)
        # A supervisor that died (killed, say) may have left its replicas running: they
        # would train and write beside the new run. They end first.
        left = _kill_orphans(job)
        if left:
            raise LocalJobError(
                f"processes {left} of the earlier run of {namespace}/{name} still run and "
                "do not end on SIGKILL; stop them before applying again"
            )
        shutil.rmtree(job.path, ignore_errors=True)
        job.path.mkdir(parents=True)
        write_json(job.manifest_file, manifest)
        with job.supervisor_log.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "operator_client.cluster.supervisor", str(job.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this command and its terminal's Ctrl-C
            )
        deadline = time.monotonic() + 30
        while not job.status():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = job.supervisor_log.read_text(errors="replace")[-2000:]
                raise LocalJobError(f"the local supervisor did not start:\n{tail}")
            time.sleep(0.05)
        return job

    def get(self, namespace: str, name: str) -> JobDir:
        """An existing job's directory, or LocalJobError naming what exists."""
        job = self.job(namespace, name)
        if not job.exists():
            known = ", ".join(n for n, _ in self.list(namespace)) or "none"
            raise LocalJobError(
                f"no local job {namespace}/{name} (local jobs in {namespace}: {known})"
            )
        return job

    def list(self, namespace: str | None = None) -> list[tuple[str, JobDir]]:
        """(name, directory) of every local job, in one namespace or all."""
        base = self.root / "local"
        spaces = [base / namespace] if namespace else sorted(base.glob("*"))
        return [
            (d.name, JobDir(d))
            for space in spaces
            for d in sorted(space.glob("*"))
            if (d / "manifest.json").is_file()
        ]

    def stop(self, job: JobDir, reason: str, *, force: bool = False) -> bool:
        """Ask the supervisor to stop the job (SIGTERM, or SIGINT to kill at once).
        False when no supervisor is running."""
        pid = job.supervisor_pid()
        if pid is None or not job.supervisor_alive():
            return False
        if not job.stop_file.exists():
            job.stop_file.write_text(reason + "\n")
        try:
            os.kill(pid, signal.SIGINT if force else signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def wait_stopped(self, job: JobDir, timeout: float) -> bool:
        """Wait for the supervisor to exit; False on timeout."""
        deadline = time.monotonic() + timeout
        while job.supervisor_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def delete(self, job: JobDir, grace: float | None = None) -> None:
        """Stop the job if it runs, then remove its record (stored data stays)."""
        manifest = job.manifest()
        timeout = grace if grace is not None else lc.Policy.from_manifest(manifest).grace_seconds
        if self.stop(job, "deleted (kctl-train delete)") and not self.wait_stopped(
            job, timeout + 10
        ):
            self.stop(job, "deleted (kctl-train delete)", force=True)
            if not self.wait_stopped(job, 10):
                raise LocalJobError(f"the supervisor of {job.path} does not exit; try again")
        if not job.supervisor_alive():
            left = _kill_orphans(job)
            if left:
                raise LocalJobError(f"processes {left} of {job.path} do not end on SIGKILL")
        shutil.rmtree(job.path)


def _kill_orphans(job: JobDir) -> list[int]:
    """Every process a dead supervisor left running (it was killed itself): each
    replica's process group and every process carrying the job's marker, wherever it
    re-parented. A group is only signalled while its leader still runs the replica's
    program (PIDs are reused). Returns the PIDs still alive afterwards."""
    for replica in job.status().get("local", {}).get("replicas", []):
        pid = replica.get("pid")
        if not pid:
            continue
        cmdline = Path(f"/proc/{pid}/cmdline")
        try:
            if cmdline.parent.parent.is_dir() and b"kctl-train" not in cmdline.read_bytes():
                continue  # the PID was reused by something else
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return pod_processes.kill_all(pod_processes.job_prefix(job.path))
