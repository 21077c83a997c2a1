"""Per-rank outputs: rows a LightningModule records per split and epoch.

In the user's module::

    from operator_client.runtime.outputs import record
    record(self, "val", [{"subject": s, "prediction": p} for s, p in zip(ids, preds)])

Each rank appends to its own local CSV per (split, epoch). At the end of each epoch all
ranks upload their files and rank 0 commits the set with a manifest (docs/STORAGE.md); a
re-run epoch replaces its manifest, so stale files from an earlier, larger world are
never aggregated.
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..storage import ObjectStore, join_key
from ..storage.base import sha256_file

log = logging.getLogger("kctl_train.outputs")

PREFIX = "outputs"
MANIFEST = "MANIFEST.json"
# A split names a directory of the run root and of a collected copy: a plain name.
SPLIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")


def epoch_key(split: str, epoch: int) -> str:
    """Directory key of one split's files for one epoch."""
    return join_key(PREFIX, split, f"epoch-{epoch:05d}")


def rank_key(split: str, epoch: int, rank: int) -> str:
    return join_key(epoch_key(split, epoch), f"rank-{rank:05d}.csv")


@dataclass(frozen=True)
class MemberFile:
    key: str
    rank: int
    rows: int
    size: int
    sha256: str


class RankOutputs:
    """The local per-rank files of one worker."""

    def __init__(self, scratch: Path, rank: int) -> None:
        self.scratch, self.rank = scratch, rank
        self._columns: dict[tuple[str, int], list[str]] = {}
        self._rows: dict[tuple[str, int], int] = {}

    def path(self, split: str, epoch: int) -> Path:
        return self.scratch / split / f"epoch-{epoch:05d}" / f"rank-{self.rank:05d}.csv"

    def record(self, split: str, epoch: int, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows (same keys in every row of a split) to this rank's file."""
        if not SPLIT_NAME.fullmatch(split):
            raise ValueError(f"split name {split!r}: use a plain name such as 'val'")
        unit = (split, epoch)
        path = self.path(split, epoch)
        if unit not in self._rows:
            self._fresh(path)
            self._rows[unit] = 0
        with path.open("a", newline="") as fh:
            writer = csv.writer(fh)
            for row in rows:
                keys = list(row)
                if unit not in self._columns:
                    self._columns[unit] = keys
                    writer.writerow(keys)
                elif keys != self._columns[unit]:
                    raise ValueError(
                        f"split {split!r}: row keys {keys} differ from the first "
                        f"row's {self._columns[unit]}"
                    )
                writer.writerow(row.values())
                self._rows[unit] += 1

    @staticmethod
    def _fresh(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # an epoch re-run after a restart starts its file again

    def pending(self, epoch: int) -> set[str]:
        return {split for split, e in self._rows if e == epoch}

    def take(self, split: str, epoch: int) -> tuple[Path, int]:
        """The file and row count of a unit, forgetting it (it is being committed)."""
        rows = self._rows.pop((split, epoch), 0)
        self._columns.pop((split, epoch), None)
        path = self.path(split, epoch)
        if not path.exists():
            self._fresh(path)  # a rank that saw no rows still contributes an empty member
        return path, rows


def commit_epoch(
    store: ObjectStore,
    outputs: RankOutputs,
    epoch: int,
    *,
    rank: int,
    world_size: int,
    attempt: int,
    gather: Callable[[Any], list[Any]],
    barrier: Callable[[], None],
    fence: Callable[[], None] = lambda: None,
) -> list[str]:
    """Collective: every rank calls it at the same point. Uploads this rank's files for
    the epoch; rank 0 writes each split's manifest once all members are uploaded. Rank 0
    asks `fence` before it uncommits or commits anything (runinfo.fence)."""
    splits = sorted(set().union(*gather(outputs.pending(epoch))))
    if not splits:
        return []
    if rank == 0:
        fence()
        # Uncommit a previous run of this epoch before its files are overwritten.
        store.delete(join_key(epoch_key(s, epoch), MANIFEST) for s in splits)
    barrier()
    mine = []
    for split in splits:
        path, rows = outputs.take(split, epoch)
        key = rank_key(split, epoch, rank)
        store.put_file(key, path)
        mine.append(MemberFile(key, rank, rows, path.stat().st_size, sha256_file(path)))
    everyone: list[list[MemberFile]] = gather(mine)
    if rank == 0:
        fence()
        for i, split in enumerate(splits):
            members = sorted((m[i] for m in everyone), key=lambda m: m.rank)
            body = {
                "split": split,
                "epoch": epoch,
                "worldSize": world_size,
                "attempt": attempt,
                "members": [asdict(m) for m in members],
            }
            store.put_bytes(
                join_key(epoch_key(split, epoch), MANIFEST), json.dumps(body, indent=2).encode()
            )
    barrier()
    return splits
