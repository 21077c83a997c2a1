"""Aggregate committed per-rank output files into one table per split (docs/STORAGE.md).

Streams rows with a real CSV reader and writer: header once, every row exactly once,
epochs and ranks in numeric order, an `epoch` and a `rank` column in front. Memory stays
flat whatever the number of ranks. Used by rank 0 at the end of a run and by collect.

`outputs/<split>/all.csv` is committed like every other unit: its manifest
(`all.json`: size, sha256, rows and the epoch units it covers) is written after it, so
collect can verify it and knows when it is stale.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage import ObjectStore, StoreError, join_key, safe_relative_path
from ..storage.base import file_matches, sha256_file
from ..storage.keys import UnsafeKeyError, contained_path
from .documents import Document, committed_manifests
from .outputs import PREFIX, SPLIT_NAME

AGGREGATE = "all.csv"
AGGREGATE_MANIFEST = "all.json"


class AggregateError(Exception):
    """Committed outputs are inconsistent (headers differ, a member fails verification)."""


def _epoch_manifest(data: bytes) -> dict[str, Any]:
    """An epoch manifest, checked for every field aggregation reads; ValueError otherwise."""
    doc = Document.parse(data, "output manifest")

    def plain(name: str) -> None:
        if not SPLIT_NAME.fullmatch(name):
            raise ValueError(f"split name {name!r} is not a plain name")

    members = [
        {
            "key": m.text("key", safe_relative_path),
            "rank": m.count("rank"),
            "size": m.count("size"),
            "sha256": m.sha256("sha256"),
        }
        for m in doc.objects("members")
    ]
    return {
        **doc.raw,
        "split": doc.text("split", plain),
        "epoch": doc.count("epoch"),
        "attempt": doc.count("attempt"),
        "members": members,
    }


@dataclass(frozen=True)
class AggregateManifest:
    """The commit of one split's aggregate (all.json)."""

    rows: int
    size: int
    sha256: str
    units: list[dict[str, int]]

    @classmethod
    def from_json(cls, data: bytes) -> AggregateManifest:
        doc = Document.parse(data, "aggregate manifest")
        return cls(
            rows=doc.count("rows"),
            size=doc.count("size"),
            sha256=doc.sha256("sha256"),
            units=[{"epoch": u.count("epoch"), "attempt": u.count("attempt")}
                   for u in doc.objects("units")],
        )  # fmt: skip


def committed_units(
    store: ObjectStore, problems: list[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Epoch manifests per split, in epoch order. A manifest that cannot be read or lacks
    a field is skipped with a warning naming its key (appended to `problems` too)."""
    units: dict[str, list[dict[str, Any]]] = {}
    for manifest in committed_manifests(
        store, PREFIX, lambda _key, data: _epoch_manifest(data), "output manifest", problems
    ):
        units.setdefault(manifest["split"], []).append(manifest)
    for manifests in units.values():
        manifests.sort(key=lambda m: m["epoch"])
    return units


def _rows(path: Path) -> Iterator[list[str]]:
    with path.open(newline="") as fh:
        yield from csv.reader(fh)


def aggregate_split(
    store: ObjectStore, split: str, manifests: list[dict[str, Any]], scratch: Path
) -> tuple[Path, int]:
    """Write the aggregate of one split to a local file; returns it and its row count.
    Member files are downloaded under scratch/members and removed once the split is
    written; after a failure the verified ones stay, and a retry does not fetch them again."""
    scratch.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=scratch, prefix=f".{split}.", suffix=".csv")
    header: list[str] | None = None
    count = 0
    done: list[Path] = []
    try:
        with os.fdopen(fd, "w", newline="") as out:
            writer = csv.writer(out)
            for manifest in manifests:
                for member in sorted(manifest["members"], key=lambda m: int(m["rank"])):
                    local = _member_file(store, member, scratch / "members")
                    done.append(local)
                    rows = _rows(local)
                    first = next(rows, None)
                    if first is None:
                        continue  # a rank without rows in this epoch
                    if header is None:
                        header = first
                        writer.writerow(["epoch", "rank", *header])
                    elif first != header:
                        raise AggregateError(
                            f"{member['key']}: columns {first} differ from {header}"
                        )
                    epoch, rank = str(manifest["epoch"]), str(member["rank"])
                    for row in rows:
                        writer.writerow([epoch, rank, *row])
                        count += 1
    except BaseException:
        os.unlink(tmp)
        raise
    for local in done:
        local.unlink(missing_ok=True)
    return Path(tmp), count


def _member_file(store: ObjectStore, member: dict[str, Any], members: Path) -> Path:
    """A verified local copy of one member (kept from an earlier try, or downloaded)."""
    try:  # a manifest names its members: still never a path outside scratch
        local = contained_path(members, member["key"])
        if local.is_file() and file_matches(local, member["size"], member["sha256"]):
            return local
        store.get_file(member["key"], local)
    except (StoreError, UnsafeKeyError) as exc:
        raise AggregateError(f"{member['key']}: {exc}") from exc
    if not file_matches(local, member["size"], member["sha256"]):
        local.unlink()
        raise AggregateError(f"{member['key']} does not match its manifest")
    return local


def covered_units(manifests: list[dict[str, Any]]) -> list[dict[str, int]]:
    """The (epoch, attempt) pairs an aggregate of these epoch manifests is built from."""
    return [{"epoch": m["epoch"], "attempt": m["attempt"]} for m in manifests]


def aggregate_manifest(split: str, path: Path, rows: int, manifests: list[dict[str, Any]]) -> bytes:
    """The manifest that commits one split's aggregate file."""
    body = {
        "split": split,
        "rows": rows,
        "size": path.stat().st_size,
        "sha256": sha256_file(path),
        "units": covered_units(manifests),
    }
    return json.dumps(body, indent=2, sort_keys=True).encode()


def aggregate_all(store: ObjectStore, scratch: Path) -> dict[str, int]:
    """Aggregate every split and publish `outputs/<split>/all.csv`; rows per split."""
    counts = {}
    for split, manifests in sorted(committed_units(store).items()):
        path, counts[split] = aggregate_split(store, split, manifests, scratch)
        manifest = join_key(PREFIX, split, AGGREGATE_MANIFEST)
        store.delete([manifest])  # uncommit the previous aggregate before replacing it
        store.put_file(join_key(PREFIX, split, AGGREGATE), path)
        store.put_bytes(manifest, aggregate_manifest(split, path, counts[split], manifests))
        path.unlink()
    return counts
