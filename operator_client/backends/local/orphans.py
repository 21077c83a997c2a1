"""The processes a dead supervisor left running: found and ended before a job is deleted,
or applied again where a new supervisor cannot take them over (adoption.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ...controlplane import lifecycle as lc
from . import pod_processes
from .jobdir import JobDir
from .pods.launch import load_mode


def kill_orphans(job: JobDir) -> list[int]:
    """Every process a dead supervisor left running (it was killed itself): each
    replica's process group and every process carrying the job's marker, wherever it
    re-parented. A group is only signalled while its leader still runs the replica's
    program (PIDs are reused). Returns the PIDs still alive afterwards."""
    try:
        local = job.local_status()
    except ValueError:
        local = None
    for replica in local.replicas if local else ():
        pid = replica.pid
        if not pid:
            continue
        cmdline = Path(f"/proc/{pid}/cmdline")
        try:
            program = cmdline.read_bytes() if cmdline.parent.parent.is_dir() else b"kctl-train"
            if b"kctl-train" not in program and b"operator_client" not in program:
                continue  # the PID was reused by something else
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    left = pod_processes.kill_all(pod_processes.job_prefix(job.path))
    if load_mode(job)[0].sandboxed:
        from .pods.sandbox import release_job

        release_job(job.path, [r.name for r in lc.replicas_of(job.workload())])
    return left
