"""Fault requests for a local job's supervisor (`kctl-train chaos`): a request is a file in
the job's chaos/ directory; the supervisor applies it in its next round, answers beside
it, and heals a timed fault when its time is up even if nobody is watching."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from ..types import Fault
from .jobdir import JobDir, write_json


def request(job: JobDir, fault: Fault, timeout: float = 15.0) -> tuple[bool, str]:
    """Hand `fault` to the job's supervisor and wait for its answer (ok, message)."""
    job.chaos_dir.mkdir(exist_ok=True)
    name = f"{time.time():.6f}-{uuid.uuid4().hex[:8]}"
    write_json(job.chaos_dir / f"{name}.json", asdict(fault))
    answer = job.chaos_dir / f"{name}.answer"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer.is_file():
            body = json.loads(answer.read_text())
            answer.unlink()
            return bool(body["ok"]), str(body["message"])
        time.sleep(0.05)
    (job.chaos_dir / f"{name}.json").unlink(missing_ok=True)
    return False, f"the supervisor did not answer within {timeout:g}s"


def pending(job: JobDir) -> Iterator[tuple[Path, Fault]]:
    """Requests not yet applied, oldest first (the supervisor's side)."""
    if not job.chaos_dir.is_dir():
        return
    for path in sorted(job.chaos_dir.glob("*.json")):
        try:
            fault = Fault(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # half-written, or not ours
        yield path, fault


def answer(path: Path, ok: bool, message: str) -> None:
    write_json(path.with_suffix(".answer"), {"ok": ok, "message": message})
    path.unlink(missing_ok=True)
