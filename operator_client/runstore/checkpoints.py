"""The checkpoint commit protocol (docs/STORAGE.md): files, then MANIFEST.json, then LATEST.

A checkpoint exists for readers only once its manifest does. Retention deletes an old
checkpoint's manifest before its files, so a half-deleted checkpoint is never mistaken
for a whole one. Resume takes the newest committed checkpoint whose files verify, and
retention keeps the newest `keep` that verify: a corrupt checkpoint never displaces a
good one (docs/STORAGE.md).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..contract import checkpoint_name
from ..storage import ObjectStore, StoreError, join_key, safe_relative_path
from ..storage.base import file_matches, sha256_file
from .documents import Document, committed_manifests

log = logging.getLogger("kctl_train.checkpoints")

PREFIX = "checkpoints"
MANIFEST = "MANIFEST.json"
LATEST = join_key(PREFIX, "LATEST")
MODEL_FILE = "model.ckpt"


def checkpoint_key(step: int) -> str:
    """The directory key of the checkpoint saved at a global step."""
    return join_key(PREFIX, checkpoint_name(step))


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    step: int
    epoch: int
    attempt: int
    world_size: int
    members: list[Member]
    created: float = field(default_factory=time.time)

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
            members=[
                Member(m.text("name", safe_relative_path), m.count("size"), m.sha256("sha256"))
                for m in doc.objects("members")
            ],
            created=doc.number("created") if doc.has("created") else 0.0,
        )


class Verified:
    """Which committed checkpoints verify, remembered: committed files never change, so
    each is downloaded and hashed at most once (and never the ones this process wrote).
    Only definite answers are remembered; an unreadable store is asked again next time."""

    def __init__(self, store: ObjectStore, scratch: Path | None = None) -> None:
        self.store, self.scratch = store, scratch
        self._known: dict[str, bool] = {}

    def mark(self, manifest: Manifest, ok: bool) -> None:
        self._known[manifest.key] = ok

    def check(self, manifest: Manifest) -> bool:
        """Whether the checkpoint's files are all there and match its manifest."""
        if manifest.key in self._known:
            return self._known[manifest.key]
        with tempfile.TemporaryDirectory(dir=self.scratch, prefix=".verify-") as tmp:
            return fetch(self.store, manifest, Path(tmp), verified=self) is not None


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
) -> Manifest:
    """Upload a checkpoint's files, commit it with its manifest, point LATEST at it, and
    apply retention. Returns the manifest. `fence` raises when this writer must not
    commit any more (runinfo.fence); it is asked before the commit and before retention."""
    members = []
    for name, path in sorted(files.items()):
        members.append(Member(name, path.stat().st_size, sha256_file(path)))
        store.put_file(join_key(checkpoint_key(step), name), path)
    manifest = Manifest(step, epoch, attempt, world_size, members)
    fence()
    store.put_bytes(join_key(manifest.key, MANIFEST), manifest.to_json())
    store.put_bytes(LATEST, manifest.key.encode())
    verified = verified or Verified(store)
    verified.mark(manifest, True)  # hashed from the very files just uploaded
    fence()
    retain(store, keep, verified)
    return manifest


def committed(store: ObjectStore, problems: list[str] | None = None) -> list[Manifest]:
    """Committed checkpoints, newest first. A manifest that cannot be read, has another
    shape, or names another step than its directory is skipped with a warning (appended to
    `problems` too)."""

    def parse(key: str, data: bytes) -> Manifest:
        manifest = Manifest.from_json(data)
        if join_key(manifest.key, MANIFEST) != key:
            raise ValueError(f"it names step {manifest.step}, another directory")
        return manifest

    found = committed_manifests(store, PREFIX, parse, "checkpoint manifest", problems)
    return sorted(found, key=lambda m: m.step, reverse=True)


def retain(store: ObjectStore, keep: int, verified: Verified | None = None) -> None:
    """Keep the newest `keep` committed checkpoints that verify, and any newer ones that
    do not (never counted, they go once `keep` good ones are newer); delete the rest and
    uncommitted leftovers older than the newest commit (crashed uploads)."""
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
    objects = store.list(PREFIX + "/")
    dirs = {o.key.rsplit("/", 1)[0] for o in objects if o.key != LATEST}
    for directory in sorted(dirs - keep_keys):
        step_text = directory.rsplit("-", 1)[-1]
        if step_text.isdigit() and int(step_text) >= newest:
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
    Returns the model file's path, or None (with a warning) when anything is off; the
    answer is remembered in `verified` when it is definite (missing or corrupt files)."""
    dest.mkdir(parents=True, exist_ok=True)
    directory = manifest.key if directory is None else directory
    problem, definite = _download(store, manifest, dest, directory)
    if problem is not None:
        log.warning("checkpoint %s: %s; skipping it", manifest.key, problem)
    if verified is not None and definite:
        verified.mark(manifest, problem is None)
    return None if problem else dest / MODEL_FILE


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
        try:
            store.get_file(key, dest / member.name)
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
