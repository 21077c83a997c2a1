"""The checkpoint commit protocol (docs/STORAGE.md): every writer's files and its part
record, then MANIFEST.json (rank 0, once every part is in the store), then LATEST.

A checkpoint exists for readers only once its manifest does, and the manifest lists every
member of every part, so readers need nothing else. Retention deletes an old checkpoint's
manifest before its files, so a half-deleted checkpoint is never mistaken for a whole one.
Resume takes the newest committed checkpoint whose files verify, and retention keeps the
newest `keep` that verify: a corrupt checkpoint never displaces a good one.

Two formats: `dcp` (torch.distributed.checkpoint: `.metadata` and one `__<rank>_0.distcp`
share per writer, runtime/checkpoint_format.py) and `lightning` (one `model.ckpt` written
by rank 0, what kctl-train wrote before; still resumed and collected).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import checkpoint_name
from ..storage import ObjectStore, StoreError, join_key, safe_relative_path
from ..storage.base import file_matches, sha256_file
from .documents import Document, committed_manifests

if TYPE_CHECKING:
    from ..spec.model import CheckpointPolicy

log = logging.getLogger("kctl_train.checkpoints")

PREFIX = "checkpoints"
MANIFEST = "MANIFEST.json"
LATEST = join_key(PREFIX, "LATEST")
MODEL_FILE = "model.ckpt"
PARTS = "parts"
DCP, LIGHTNING = "dcp", "lightning"
FORMATS = (DCP, LIGHTNING)
# How long rank 0 waits for the other writers' parts of one checkpoint before it gives up
# on committing it (a writer that died mid-save: the step is simply never committed).
PART_TIMEOUT = 600.0


def checkpoint_key(step: int) -> str:
    """The directory key of the checkpoint saved at a global step."""
    return join_key(PREFIX, checkpoint_name(step))


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    sha256: str


def _members(doc: Document) -> list[Member]:
    return [
        Member(m.text("name", safe_relative_path), m.count("size"), m.sha256("sha256"))
        for m in doc.objects("members")
    ]


def _numbers(doc: Document, name: str) -> dict[str, float]:
    """An optional mapping of names to finite numbers (absent in older manifests)."""
    raw = doc.mapping(name) if doc.has(name) else {}
    return {key: Document(raw, name).number(key) for key in raw}


@dataclass(frozen=True)
class Best:
    """Which checkpoints are the best: by a metric each recorded when saved, smaller or
    larger being better, and how many of them retention keeps."""

    monitor: str
    mode: str  # min or max
    keep: int

    @classmethod
    def of(cls, policy: CheckpointPolicy) -> Best | None:
        """The spec's ranking (None: no monitor)."""
        return cls(*policy.best) if policy.best else None

    def ranked(self, manifests: list[Manifest]) -> list[Manifest]:
        """The manifests that recorded the metric, best first (the newer of equals)."""
        scored = [m for m in manifests if self.monitor in m.scores]
        sign = 1.0 if self.mode == "min" else -1.0
        return sorted(scored, key=lambda m: (sign * m.scores[self.monitor], -m.step))


@dataclass(frozen=True)
class Manifest:
    step: int
    epoch: int
    attempt: int
    world_size: int
    members: list[Member]
    created: float = field(default_factory=time.time)
    format: str = LIGHTNING  # manifests written before DCP have no format: one model.ckpt
    # Seconds of the save: training stalled, slowest writer's write and upload, commit.
    timings: dict[str, float] = field(default_factory=dict)
    # The metrics Lightning held when it was saved (val_loss, ...): the best are kept.
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return checkpoint_key(self.step)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """A manifest as stored; ValueError naming the field for any other shape."""
        doc = Document.parse(data, "checkpoint manifest")
        return cls(
            step=doc.count("step"),
            epoch=doc.count("epoch"),
            attempt=doc.count("attempt"),
            world_size=doc.count("world_size", minimum=1),
            members=_members(doc),
            created=doc.number("created") if doc.has("created") else 0.0,
            format=doc.text("format", _known_format) if doc.has("format") else LIGHTNING,
            timings=_numbers(doc, "timings"),
            scores=_numbers(doc, "scores"),
        )


def _known_format(name: str) -> None:
    if name not in FORMATS:
        raise ValueError(f"{name!r} is not a checkpoint format ({', '.join(FORMATS)})")


@dataclass(frozen=True)
class Part:
    """One writer's share of a checkpoint, recorded after its files are in the store."""

    rank: int
    step: int
    attempt: int
    members: list[Member]
    seconds: float  # this writer's write and upload

    @property
    def key(self) -> str:
        return part_key(self.step, self.rank)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Part:
        doc = Document.parse(data, "checkpoint part")
        return cls(
            rank=doc.count("rank"),
            step=doc.count("step"),
            attempt=doc.count("attempt"),
            members=_members(doc),
            seconds=doc.number("seconds"),
        )


def part_key(step: int, rank: int) -> str:
    return join_key(checkpoint_key(step), PARTS, f"rank-{rank:05d}.json")


class CommitTimeout(Exception):
    """Not every writer's part arrived in time: the checkpoint is not committed."""


class Verified:
    """Which committed checkpoints verify, remembered: committed files never change, so
    each is downloaded and hashed at most once (and never the ones this process wrote).
    Only definite answers are remembered; an unreadable store is asked again next time."""

    def __init__(self, store: ObjectStore, scratch: Path | None = None) -> None:
        self.store, self.scratch = store, scratch
        self._known: dict[str, bool] = {}
        # Where this process downloaded a checkpoint and verified it: not hashed again.
        self.fetched: dict[str, Path] = {}

    def mark(self, manifest: Manifest, ok: bool) -> None:
        self._known[manifest.key] = ok

    def check(self, manifest: Manifest) -> bool:
        """Whether the checkpoint's files are all there and match its manifest."""
        if manifest.key in self._known:
            return self._known[manifest.key]
        with tempfile.TemporaryDirectory(dir=self.scratch, prefix=".verify-") as tmp:
            return fetch(self.store, manifest, Path(tmp), verified=self) is not None


def publish_part(
    store: ObjectStore, files: dict[str, Path], *, step: int, rank: int, attempt: int,
    seconds: float = 0.0,
) -> Part:  # fmt: skip
    """Upload one writer's files of a checkpoint, then its part record (written last: a
    part exists once its record does). A file already where the store keeps its key (a
    writer that wrote into a file:// store) is not copied. `seconds` is what writing them
    took so far."""
    started = time.monotonic()
    members = []
    for name, path in sorted(files.items()):
        key = join_key(checkpoint_key(step), name)
        members.append(Member(name, path.stat().st_size, sha256_file(path)))
        if store.local_path(key) != path:
            store.put_file(key, path)
    part = Part(rank, step, attempt, members, seconds + time.monotonic() - started)
    store.put_bytes(part.key, part.to_json())
    return part


def gather_parts(
    store: ObjectStore,
    step: int,
    attempt: int,
    ranks: list[int],
    timeout: float = PART_TIMEOUT,
    abandoned: Callable[[], bool] = lambda: False,
) -> list[Part]:
    """Wait until every rank in `ranks` has recorded its part of this step for this attempt
    (polling the store, bounded by `timeout`, or until `abandoned()`: a writer said it
    failed); CommitTimeout naming the missing ones. A record of another attempt is an
    earlier run's leftover: it does not count."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    found: dict[int, Part] = {}
    while True:
        listed = {o.key for o in store.list(join_key(checkpoint_key(step), PARTS) + "/")}
        for rank in ranks:
            if rank not in found and part_key(step, rank) in listed:
                try:
                    part = Part.from_json(store.get_bytes(part_key(step, rank)))
                except (StoreError, ValueError) as exc:
                    log.warning("part of rank %d at step %d unreadable: %s", rank, step, exc)
                    continue
                if (part.rank, part.step, part.attempt) == (rank, step, attempt):
                    found[rank] = part
        missing = [r for r in ranks if r not in found]
        if not missing:
            return [found[r] for r in ranks]
        if time.monotonic() > deadline or abandoned():
            why = "a writer failed" if abandoned() else f"none after {timeout:.0f}s"
            raise CommitTimeout(
                f"checkpoint at step {step}: no part of rank(s) {missing} ({why}); not committed"
            )
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def commit(
    store: ObjectStore,
    parts: list[Part],
    *,
    step: int,
    epoch: int,
    attempt: int,
    world_size: int,
    keep: int,
    fmt: str,
    timings: dict[str, float] | None = None,
    fence: Callable[[], None] = lambda: None,
    verified: Verified | None = None,
    scores: dict[str, float] | None = None,
    best: Best | None = None,
) -> Manifest:
    """Commit a checkpoint whose parts are all in the store: its manifest (every member of
    every part), then LATEST, then the step's leftovers of earlier attempts and retention.
    `fence` raises when this writer must not commit any more (runinfo.fence); it is asked
    before the commit and before retention."""
    members = sorted((m for p in parts for m in p.members), key=lambda m: m.name)
    manifest = Manifest(step, epoch, attempt, world_size, members, format=fmt,
                        timings=dict(timings or {}), scores=dict(scores or {}))  # fmt: skip
    fence()
    store.put_bytes(join_key(manifest.key, MANIFEST), manifest.to_json())
    store.put_bytes(LATEST, manifest.key.encode())
    verified = verified or Verified(store)
    verified.mark(manifest, True)  # hashed by its writers from the very files they uploaded
    keep_keys = {join_key(manifest.key, m.name) for m in members} | {p.key for p in parts}
    stale = [o.key for o in store.list(manifest.key + "/") if o.key not in keep_keys]
    store.delete(k for k in stale if not k.endswith("/" + MANIFEST))
    fence()
    retain(store, keep, verified, best)
    return manifest


def publish(
    store: ObjectStore,
    files: dict[str, Path],
    *,
    step: int,
    epoch: int,
    attempt: int,
    world_size: int,
    keep: int,
    fence: Callable[[], None] = lambda: None,
    verified: Verified | None = None,
    fmt: str = LIGHTNING,
) -> Manifest:
    """One writer's checkpoint: its files and part, then the commit. Returns the manifest."""
    part = publish_part(store, files, step=step, rank=0, attempt=attempt)
    return commit(
        store, [part], step=step, epoch=epoch, attempt=attempt, world_size=world_size,
        keep=keep, fmt=fmt, fence=fence, verified=verified,
    )  # fmt: skip


def committed(store: ObjectStore, problems: list[str] | None = None) -> list[Manifest]:
    """Committed checkpoints, newest first: by the attempt that committed it, then step (a
    run that began again from an earlier checkpoint, runstore/resume_line.py, puts its own
    before the later steps of the line it left). A manifest that cannot be read, has
    another shape, or names another step than its directory is skipped with a warning
    (appended to `problems` too)."""

    def parse(key: str, data: bytes) -> Manifest:
        manifest = Manifest.from_json(data)
        if join_key(manifest.key, MANIFEST) != key:
            raise ValueError(f"it names step {manifest.step}, another directory")
        return manifest

    found = committed_manifests(store, PREFIX, parse, "checkpoint manifest", problems)
    return sorted(found, key=lambda m: (m.attempt, m.step), reverse=True)


def retain(
    store: ObjectStore, keep: int, verified: Verified | None = None, best: Best | None = None
) -> None:
    """Keep the newest `keep` committed checkpoints that verify, and any newer ones that
    do not (never counted, they go once `keep` good ones are newer), and the `best.keep`
    best that verify; delete the rest and uncommitted leftovers older than the newest
    commit (crashed uploads)."""
    manifests = committed(store)
    if not manifests:
        return
    verified = verified or Verified(store)
    newest = manifests[0].step
    keep_keys: set[str] = set()
    good = 0
    for manifest in manifests:
        if good >= keep:
            break
        keep_keys.add(manifest.key)
        if verified.check(manifest):
            good += 1
        else:
            log.warning("checkpoint %s does not verify; not counted toward keep", manifest.key)
    if best is not None:
        winners = [m for m in best.ranked(manifests) if verified.check(m)]
        keep_keys.update(m.key for m in winners[: best.keep])
    objects = store.list(PREFIX + "/")
    # A checkpoint is everything below checkpoints/<step>/ (its part records included).
    dirs = {"/".join(o.key.split("/", 2)[:2]) for o in objects if o.key.count("/") >= 2}
    uncommitted = dirs - {m.key for m in manifests}
    for directory in sorted(dirs - keep_keys):
        step_text = directory.rsplit("-", 1)[-1]
        if directory in uncommitted and step_text.isdigit() and int(step_text) >= newest:
            continue  # an upload that may still be in progress
        store.delete([join_key(directory, MANIFEST)])  # uncommit first
        store.delete(o.key for o in objects if o.key.startswith(directory + "/"))


def fetch(
    store: ObjectStore,
    manifest: Manifest,
    dest: Path,
    directory: str | None = None,
    verified: Verified | None = None,
) -> Path | None:
    """Download a committed checkpoint's files into dest and verify sizes and sha256.
    `directory` is the checkpoint's key in `store` (default: its place in a run root).
    Returns what a loader reads (the directory of a dcp checkpoint, the model file of a
    lightning one), or None (with a warning) when anything is off; the answer is
    remembered in `verified` when it is definite (missing or corrupt files)."""
    dest.mkdir(parents=True, exist_ok=True)
    directory = manifest.key if directory is None else directory
    if verified is not None and verified.fetched.get(manifest.key) == dest:
        return dest if manifest.format == DCP else dest / MODEL_FILE
    problem, definite = _download(store, manifest, dest, directory)
    if problem is not None:
        log.warning("checkpoint %s: %s; skipping it", manifest.key, problem)
    if verified is not None and definite:
        verified.mark(manifest, problem is None)
    if problem:
        return None
    if verified is not None:
        verified.fetched[manifest.key] = dest
    return dest if manifest.format == DCP else dest / MODEL_FILE


def _download(
    store: ObjectStore, manifest: Manifest, dest: Path, directory: str
) -> tuple[str | None, bool]:
    """Why the checkpoint's files cannot be used (None: all downloaded and verified), and
    whether that answer is definite (an unreadable store may answer otherwise later)."""
    present = {o.key for o in store.list(directory + "/")} if directory else None
    for member in manifest.members:
        key = join_key(directory, member.name)
        if present is not None and key not in present:
            return f"{member.name} is missing", True
        local = dest / member.name
        if local.is_file() and file_matches(local, member.size, member.sha256):
            continue  # fetched and verified already (by rank 0 choosing it, say)
        try:
            store.get_file(key, local)
        except StoreError as exc:
            return f"{member.name} is unreadable ({exc})", False
        if not file_matches(dest / member.name, member.size, member.sha256):
            return f"{member.name} does not match its manifest (corrupt)", True
    return None, True


def newest_verified(
    store: ObjectStore, dest: Path, verified: Verified | None = None
) -> tuple[Manifest, Path] | None:
    """The newest committed checkpoint whose files verify, downloaded into dest."""
    for manifest in committed(store):
        path = fetch(store, manifest, dest / manifest.key.rsplit("/", 1)[-1], verified=verified)
        if path is not None:
            return manifest, path
        shutil.rmtree(dest / manifest.key.rsplit("/", 1)[-1], ignore_errors=True)
    return None


def first_complete(store: ObjectStore, manifests: Iterable[Manifest]) -> Manifest | None:
    """The first of `manifests` whose files are all in the store at the sizes it names,
    read from one listing: nothing is downloaded (the runtime verifies every byte when it
    resumes). What `apply` predicts a run resumes from."""
    sizes = {o.key: o.size for o in store.list(PREFIX + "/")}
    for manifest in manifests:
        if all(sizes.get(join_key(manifest.key, m.name)) == m.size for m in manifest.members):
            return manifest
    return None
