"""Run-level objects: the job-wide attempt claim, run.json and the _SUCCESS marker."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..storage import ObjectStore, StoreError, join_key
from .documents import Document

ATTEMPTS = "attempts"
RUN_JSON = "run.json"
SUCCESS = "_SUCCESS"


class Superseded(Exception):
    """A newer attempt of this run exists: this one must stop and commit nothing more
    (a replica its supervisor lost, a partitioned pod: a second writer)."""


def newest_attempt(store: ObjectStore) -> int:
    """The highest attempt number claimed so far (0: none)."""
    taken = [
        int(o.key.rsplit("/", 1)[-1].removesuffix(".json"))
        for o in store.list(ATTEMPTS + "/")
        if o.key.rsplit("/", 1)[-1].removesuffix(".json").isdigit()
    ]
    return max(taken, default=0)


def fence(store: ObjectStore, attempt: int) -> None:
    """Raise Superseded when an attempt newer than `attempt` has been claimed. Called
    right before every commit (a manifest, a marker, a retention delete), so an older
    attempt stops writing once a newer one has started."""
    newest = newest_attempt(store)
    if newest > attempt:
        raise Superseded(
            f"attempt {attempt} was superseded by attempt {newest}: another run of this job "
            "writes to the store; stopping without committing"
        )


def attempt_key(attempt: int) -> str:
    return join_key(ATTEMPTS, f"{attempt}.json")


def claim_attempt(store: ObjectStore, info: dict[str, Any]) -> int:
    """Claim the next job-wide attempt number with a conditional create: two claimers
    never get the same number (TORCHELASTIC_RESTART_COUNT is per node, not job-wide)."""
    attempt = newest_attempt(store) + 1
    while True:
        body = json.dumps({"attempt": attempt, "claimed": time.time(), **info}, sort_keys=True)
        if store.create_if_absent(attempt_key(attempt), body.encode()):
            return attempt
        attempt += 1


def write_run_json(
    store: ObjectStore,
    spec: dict[str, Any],
    spec_hash: str,
    world: dict[str, Any],
    attempt: int,
    versions: dict[str, str],
) -> None:
    """run.json: what ran, with which versions, on which world (rank 0, at every start)."""
    body = {
        "spec": spec,
        "specHash": spec_hash,
        "versions": versions,
        "world": world,
        "attempt": attempt,
        "started": time.time(),
    }
    store.put_bytes(RUN_JSON, json.dumps(body, indent=2, sort_keys=True).encode())


def write_success(store: ObjectStore, spec_hash: str, summary: dict[str, Any]) -> None:
    """The run's success marker, written last; it names the spec that finished."""
    body = {"finished": time.time(), "specHash": spec_hash, **summary}
    store.put_bytes(SUCCESS, json.dumps(body, indent=2, sort_keys=True).encode())


@dataclass(frozen=True)
class Finished:
    """A run of this spec that already finished."""

    step: int
    attempt: int


def finished(store: ObjectStore, spec_hash: str) -> Finished | None:
    """The run's success marker when a run of exactly this spec wrote it (None: not
    finished, finished another spec, or no marker kctl-train wrote). A replica that
    restarts after its job finished (a Master killed after its Workers exited) would
    otherwise wait at the rendezvous for peers that never come back."""
    try:  # one read: a missing marker is a StoreError like any other unreadable one
        doc = Document.parse(store.get_bytes(SUCCESS), SUCCESS)
        if doc.raw.get("specHash") != spec_hash:
            return None
        return Finished(doc.count("step"), doc.count("attempt", 1))
    except (StoreError, ValueError):
        return None  # the run itself reads the store and says what is wrong with it
