"""`kctl-train collect`: download a run's committed units, verified, into a directory.

What is collected (docs/STORAGE.md layout, same relative paths locally):
- the newest committed checkpoint whose files verify (or every committed one), with its
  MANIFEST.json; a newer one that fails verification is reported and skipped;
- each split's aggregate `outputs/<split>/all.csv` when its manifest (all.json) covers
  every committed epoch, otherwise rebuilt here from the committed per-rank files;
- metrics, GPU monitor files, run.json, attempts and the _SUCCESS marker;
- and `summary.json` describing all of it.

Every key is checked before anything is written (no absolute, `..`, backslash, NUL or
colliding keys; containment after resolving). Files go to a hidden name beside their
target, are verified, then renamed: a partial or corrupt file never has its final name.
Files already present with a matching checksum are skipped, so an interrupted collect
resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import KctlTrainError, NothingStored
from ..runstore import checkpoint_log, checkpoints, events, monitor, runinfo, tensorboard
from ..runstore.aggregate import (
    AGGREGATE,
    AGGREGATE_MANIFEST,
    AggregateError,
    AggregateManifest,
    aggregate_manifest,
    aggregate_split,
    committed_units,
    covered_units,
)
from ..runstore.goodput import PodTimes, account
from ..runstore.metrics import KEY as METRICS_KEY
from ..runstore.outputs import PREFIX as OUTPUTS
from ..storage import ObjectStore, StoreError, UnsafeKeyError, join_key
from ..storage.base import ObjectInfo, file_matches
from ..storage.keys import contained_path, remove_empty_parents
from ..storage.transfer import download_many
from ..untrusted import MAX_CSV, MAX_DOCUMENT, read_json

SUMMARY = "summary.json"
SCRATCH = ".kctl-train-tmp"


class CollectError(KctlTrainError):
    """Nothing could be collected safely; the message says why."""


class TransferProgress(Protocol):
    """What collect reports while it downloads (a rich bar on a terminal, lines otherwise)."""

    def add(self, files: int, total_bytes: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def file_done(self, key: str) -> None: ...
    def finish(self) -> None: ...


@dataclass(frozen=True)
class Item:
    """One object to download: where it goes and what it must match."""

    key: str
    size: int | None
    sha256: str | None = None


@dataclass
class Result:
    """What a collect did: the summary written to summary.json, and its problems."""

    summary: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def _too_long(dest: Path, key: str) -> str | None:
    """Why `key` cannot be a file name under dest on this machine (None: it can)."""
    name_max = _limit(dest, "PC_NAME_MAX", 255)
    for segment in key.split("/"):
        if len(os.fsencode(segment)) > name_max:
            return f"key {key[:80]!r}... has a path segment longer than {name_max} bytes"
    path_max = _limit(dest, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(dest.resolve() / key))) >= path_max:
        return f"key {key[:80]!r}... makes a local path longer than {path_max} bytes"
    return None


def _limit(dest: Path, name: str, default: int) -> int:
    """The file system's limit where dest is (or would be)."""
    for place in (dest, *dest.parents):
        try:
            return int(os.pathconf(place, name))
        except (OSError, ValueError):
            continue
    return default


def destinations(dest: Path, keys: list[str]) -> dict[str, Path]:
    """Each key's local path under dest; CollectError listing every unsafe, colliding or
    over-long key (before anything is written: no partial files)."""
    errors, paths = [], {}
    for key in keys:
        try:
            paths[key] = contained_path(dest, key)
        except UnsafeKeyError as exc:
            errors.append(str(exc))
            continue
        except OSError as exc:  # a name the file system refuses even to look up
            errors.append(f"key {key[:80]!r}: {exc.strerror or exc}")
            continue
        problem = _too_long(dest, key)
        if problem:
            errors.append(problem)
            del paths[key]
    seen: dict[str, str] = {}
    for key, path in paths.items():
        folded = str(path).casefold()  # one file on case-insensitive disks
        if folded in seen and seen[folded] != key:
            errors.append(f"keys {seen[folded]!r} and {key!r} map to the same local file")
        seen.setdefault(folded, key)
    parents = {str(p).casefold(): key for key, path in paths.items() for p in path.parents}
    for key, path in paths.items():
        other = parents.get(str(path).casefold())
        if other is not None:
            errors.append(f"key {key!r} is a file, but {other!r} needs it to be a directory")
    if errors:
        raise CollectError(
            "refusing to collect: the store holds keys that are not safe local paths:\n  "
            + "\n  ".join(errors)
        )
    return paths


class Downloader:
    """Verified, resumable downloads into dest."""

    def __init__(
        self, store: ObjectStore, dest: Path, concurrency: int, progress: TransferProgress | None
    ) -> None:
        self.store, self.dest, self.concurrency, self.progress = store, dest, concurrency, progress
        self.fetched = self.skipped = self.bytes = 0
        self._lock = threading.Lock()

    def _on_bytes(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
        if self.progress is not None:
            self.progress.advance(nbytes)

    def fetch(self, items: list[Item]) -> list[tuple[Item, str]]:
        """Download items not already present; returns (item, problem) for each that
        does not match what it should be (its file is not kept under its final name)."""
        paths = destinations(self.dest, [i.key for i in items])
        todo = []
        for item in items:
            path = paths[item.key]
            if item.sha256 and path.is_file() and file_matches(path, item.size or 0, item.sha256):
                self.skipped += 1
                continue
            todo.append(item)
        if self.progress is not None:
            self.progress.add(len(todo), sum(i.size or 0 for i in todo))
        partial = {i.key: paths[i.key].with_name(f".{paths[i.key].name}.partial") for i in todo}
        finished: list[Item] = []
        by_key = {i.key: i for i in todo}
        failed: dict[str, StoreError] = {}

        def file_done(key: str, path: Path) -> None:
            finished.append(by_key[key])
            if self.progress is not None:
                self.progress.file_done(key)

        try:
            download_many(
                self.store,
                [(i.key, partial[i.key]) for i in todo],
                concurrency=self.concurrency,
                progress=file_done,
                on_bytes=self._on_bytes,
                failed=failed,
            )
        finally:
            # Even when a download failed, the finished ones are kept (verified): a
            # collect run again resumes after them.
            bad = [self._settle(item, partial[item.key], paths[item.key]) for item in finished]
            for tmp in partial.values():
                tmp.unlink(missing_ok=True)
        unreadable = [(by_key[key], str(exc)) for key, exc in sorted(failed.items())]
        return [b for b in bad if b is not None] + unreadable

    def discard(self, keys: list[str]) -> None:
        """Remove these keys' files from dest (a rejected unit leaves nothing behind), and
        the directories that leaves empty."""
        for path in destinations(self.dest, keys).values():
            path.unlink(missing_ok=True)
            remove_empty_parents(path, self.dest)

    def _settle(self, item: Item, tmp: Path, path: Path) -> tuple[Item, str] | None:
        """Verify a downloaded file and give it its final name, or drop it."""
        problem = _mismatch(tmp, item)
        if problem:
            tmp.unlink()
            return item, problem
        os.replace(tmp, path)
        self.fetched += 1
        return None


def _mismatch(path: Path, item: Item) -> str | None:
    size = path.stat().st_size
    if item.size is not None and size != item.size:
        return f"{item.key}: {size} bytes, expected {item.size}"
    if item.sha256 and not file_matches(path, size, item.sha256):
        return f"{item.key}: sha256 does not match its manifest (corrupt or changed)"
    return None


def _member_items(manifest: checkpoints.Manifest) -> list[Item]:
    return [Item(join_key(manifest.key, m.name), m.size, m.sha256) for m in manifest.members]


def _manifest_item(manifest: checkpoints.Manifest, listing: dict[str, ObjectInfo]) -> Item:
    key = join_key(manifest.key, checkpoints.MANIFEST)
    listed = listing.get(key)
    return Item(key, listed.size if listed else None)


def best_of(store: ObjectStore) -> checkpoints.Best | None:
    """How the run ranks its checkpoints: run.json's checkpoint.monitor and mode (None:
    no monitor, or no run.json kctl-train wrote)."""
    try:
        run = json.loads(store.get_bytes(runinfo.RUN_JSON))
        policy = run["spec"]["spec"]["checkpoint"]
    except (StoreError, ValueError, KeyError, TypeError):
        return None
    monitor, mode = policy.get("monitor"), policy.get("mode") or "min"
    if not isinstance(monitor, str) or mode not in ("min", "max"):
        return None
    return checkpoints.Best(monitor, mode, int(policy.get("keepBest") or 1))


def choose(
    committed: list[checkpoints.Manifest], which: str, best: checkpoints.Best | None
) -> list[checkpoints.Manifest]:
    """The checkpoints to collect from, in order (the first that verifies is taken):
    `last`, newest first; `best`, best first by the run's monitor; a step, that one.
    CollectError saying what there is when none fits."""
    if which == "last":
        return committed
    if which == "best":
        if best is None:
            raise CollectError(
                "--checkpoint best: the run ranks no checkpoints (its spec.checkpoint has no "
                "monitor); collect last or a step"
            )
        ranked = best.ranked(committed)
        if not ranked:
            raise CollectError(
                f"--checkpoint best: no committed checkpoint recorded {best.monitor} (does the "
                "model log it before each save?); collect last or a step"
            )
        return ranked
    found = [m for m in committed if str(m.step) == which]
    if not found:
        steps = ", ".join(str(m.step) for m in committed) or "none"
        raise CollectError(f"--checkpoint {which}: no committed checkpoint at that step ({steps})")
    return found


def _collect_checkpoints(
    committed: list[checkpoints.Manifest],
    down: Downloader,
    listing: dict[str, ObjectInfo],
    all_checkpoints: bool,
    problems: list[str],
) -> list[dict[str, Any]]:
    collected = []
    for manifest in committed:
        # Members first, the manifest last: a collected MANIFEST.json always has its files.
        members, manifest_item = _member_items(manifest), _manifest_item(manifest, listing)
        bad = down.fetch(members) or down.fetch([manifest_item])
        if bad:
            problems.extend(problem for _, problem in bad)
            problems.append(f"checkpoint {manifest.key} failed verification; skipped")
            down.discard([i.key for i in [*members, manifest_item]])
            continue
        collected.append(
            {
                "key": manifest.key,
                "step": manifest.step,
                "epoch": manifest.epoch,
                "attempt": manifest.attempt,
                "worldSize": manifest.world_size,
                "format": manifest.format,
                "timings": manifest.timings,
                "scores": manifest.scores,
                "path": manifest.key,
                "files": [m.name for m in manifest.members],
            }
        )
        if not all_checkpoints:
            break
    return collected


def _collect_outputs(
    store: ObjectStore,
    units: dict[str, list[dict[str, Any]]],
    down: Downloader,
    listing: dict[str, ObjectInfo],
    problems: list[str],
) -> dict[str, Any]:
    dest = down.dest
    outputs: dict[str, Any] = {}
    for split, manifests in sorted(units.items()):
        key = join_key(OUTPUTS, split, AGGREGATE)
        manifest_key = join_key(OUTPUTS, split, AGGREGATE_MANIFEST)
        entry: dict[str, Any] = {"path": key, "epochs": [m["epoch"] for m in manifests]}
        (path,) = destinations(dest, [key]).values()
        committed: AggregateManifest | None = None
        raw = b""
        if join_key(OUTPUTS, split, AGGREGATE_MANIFEST) in listing:
            try:
                raw = store.get_bytes(manifest_key)
                committed = AggregateManifest.from_json(raw)
            except (StoreError, ValueError) as exc:
                problems.append(f"{manifest_key}: {exc}; rebuilding the aggregate")
        if committed is not None and committed.units == covered_units(manifests):
            bad = down.fetch([Item(key, committed.size, committed.sha256)])
            if not bad:
                (path.parent / AGGREGATE_MANIFEST).write_bytes(raw)  # already read: no 2nd GET
                outputs[split] = {**entry, "rows": committed.rows, "rebuilt": False}
                continue
            problems.extend(problem for _, problem in bad)
        # Rank 0 did not write a current aggregate (the job failed or still runs): rebuild.
        scratch = dest / SCRATCH / "aggregate"
        try:
            built, rows = aggregate_split(store, split, manifests, scratch)
        except AggregateError as exc:
            problems.append(f"outputs/{split}: cannot rebuild the aggregate: {exc}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / AGGREGATE_MANIFEST).write_bytes(
            aggregate_manifest(split, built, rows, manifests)
        )
        os.replace(built, path)
        outputs[split] = {**entry, "rows": rows, "rebuilt": True}
    return outputs


def collect(
    store: ObjectStore,
    dest: Path,
    *,
    all_checkpoints: bool = False,
    checkpoint: str = "last",
    concurrency: int = 16,
    progress: TransferProgress | None = None,
    describe: dict[str, Any] | None = None,
    pods: Sequence[PodTimes] = (),
) -> Result:
    """Collect a run root into dest and write dest/summary.json: every committed
    checkpoint (`all_checkpoints`), else the one `checkpoint` names (choose()).
    `describe` adds fields (the job's name, namespace, state) to the summary; `pods` are
    the job's pods as the backend saw them (the goodput account's queue and start-up)."""
    started = time.time()
    listing = {o.key: o for o in store.list()}
    if not listing:
        raise NothingStored(
            f"nothing is stored at {store.url}: has the job started, and is the storage right?"
        )
    # Refuse unsafe keys before the first byte is written: every key in the run root,
    # whether or not this collect downloads it (the keys a manifest names are in it too).
    destinations(dest, list(listing))
    problems: list[str] = []
    plain = _plain_files(listing, problems)
    committed = checkpoints.committed(store, problems)
    best = best_of(store)
    wanted = committed if all_checkpoints else choose(committed, checkpoint, best)
    dest.mkdir(parents=True, exist_ok=True)
    down = Downloader(store, dest, concurrency, progress)
    try:
        ckpts = _collect_checkpoints(wanted, down, listing, all_checkpoints, problems)
        units = committed_units(store, problems)
        outputs = _collect_outputs(store, units, down, listing, problems)
        problems.extend(p for _, p in down.fetch([Item(k, listing[k].size) for k in plain]))
    finally:
        if progress is not None:
            progress.finish()
    if all(split in outputs for split in units):
        shutil.rmtree(dest / SCRATCH, ignore_errors=True)
    # else the verified member files of a failed rebuild stay for the next try

    success = _json(dest / runinfo.SUCCESS) if runinfo.SUCCESS in plain else None
    if success is not None and not isinstance(success, dict):
        problems.append(f"{runinfo.SUCCESS}: not a marker kctl-train writes (not a JSON object)")
        success = None
    attempts = [k for k in plain if k.startswith(runinfo.ATTEMPTS + "/")]
    summary = {
        **(describe or {}),
        "store": store.url,
        "collectedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "complete": success is not None,
        "success": success,
        "checkpoints": ckpts,
        "committedCheckpoints": [m.step for m in committed],
        "best": _best_entry(best, committed),
        "outputs": outputs,
        "metrics": METRICS_KEY if METRICS_KEY in listing else None,
        "monitor": [k for k in plain if k.startswith(monitor.PREFIX + "/")],
        "run": runinfo.RUN_JSON if runinfo.RUN_JSON in listing else None,
        "attempts": len(attempts),
        "restarts": max(0, len(attempts) - 1),
        "goodput": _goodput(dest, plain, pods),
        "tensorboard": tensorboard.PREFIX if any(map(tensorboard.is_key, plain)) else None,
        "files": {"downloaded": down.fetched, "skipped": down.skipped, "bytes": down.bytes},
        "problems": problems,
    }
    (dest / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return Result(summary, problems)


# What collect takes beside checkpoints and outputs, each within the bounds the host reads
# it with (untrusted.py): exactly the files kctl-train writes there, never whatever else a
# pod put in its store.
_ATTEMPT = re.compile(r"attempts/\d{1,9}\.json")


def _plain_files(listing: dict[str, ObjectInfo], problems: list[str]) -> list[str]:
    """The metrics, GPU monitor files, goodput events, TensorBoard files, run.json,
    attempts and _SUCCESS of the run, by the names kctl-train gives them; one too large
    is left behind, with a problem saying so."""
    wanted: dict[str, int] = {}
    for key in listing:
        if key in (runinfo.RUN_JSON, runinfo.SUCCESS, checkpoint_log.BUDGET_KEY) or (
            _ATTEMPT.fullmatch(key)
        ):
            wanted[key] = MAX_DOCUMENT
        elif key in (METRICS_KEY, checkpoint_log.KEY, monitor.SUMMARY) or (
            key.startswith(monitor.PREFIX + "/")
            and key.count("/") == 1
            and monitor.parse_node_file(key.split("/", 1)[1]) is not None
        ):
            wanted[key] = MAX_CSV
        elif events.parse_key(key) is not None:
            wanted[key] = events.MAX_BYTES
        elif tensorboard.is_key(key):
            wanted[key] = tensorboard.MAX_BYTES
    plain = []
    for key, limit in sorted(wanted.items()):
        if listing[key].size > limit:
            problems.append(
                f"{key}: {listing[key].size} bytes, larger than kctl-train writes ({limit}); "
                "not collected"
            )
        else:
            plain.append(key)
    return plain


def _goodput(dest: Path, plain: list[str], pods: Sequence[PodTimes]) -> dict[str, Any] | None:
    """The goodput account of the collected event files (runstore/goodput.py), or None
    where the run recorded none (a run of an older kctl-train, a command job)."""
    files = []
    for key in plain:
        found = events.parse_key(key)
        if found is not None:
            files.append(events.read(dest / key, *found))
    result = account(files, pods)
    return result.to_json() if result else None


def _best_entry(
    best: checkpoints.Best | None, committed: list[checkpoints.Manifest]
) -> dict[str, Any] | None:
    """The best committed checkpoint by the run's monitor, as each recorded it."""
    ranked = best.ranked(committed) if best else []
    if not ranked or best is None:
        return None
    top = ranked[0]
    return {"step": top.step, "metric": best.monitor, "value": top.scores[best.monitor]}


def _json(path: Path) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None
