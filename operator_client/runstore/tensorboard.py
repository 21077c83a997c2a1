"""The TensorBoard files of a run: what a `train.loggers` TensorBoardLogger wrote, under
`tensorboard/` in the run store (docs/STORAGE.md), one directory per attempt by default
(`tensorboard/attempt-NNNNN/events.out.tfevents.*`, `hparams.yaml`). Rank 0 uploads them
(runtime/plugins.py); collect brings them, each within MAX_BYTES.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..storage import ObjectStore

PREFIX = "tensorboard"
# The largest TensorBoard file collect takes (a pod wrote it): scalars of a long run are
# megabytes; images and histograms more.
MAX_BYTES = 1 << 30
# The names TensorBoardLogger gives its files, under directories of plain names.
_KEY = re.compile(
    rf"{PREFIX}/(?:[A-Za-z0-9_.-]+/){{0,4}}"
    r"(?:events\.out\.tfevents\.[A-Za-z0-9_.-]+|hparams\.yaml)"
)


def is_key(key: str) -> bool:
    """Whether a store key names a TensorBoard file kctl-train uploads."""
    return _KEY.fullmatch(key) is not None and "/../" not in f"/{key}/"


def upload(store: ObjectStore, directory: Path) -> int:
    """Every TensorBoard file under `directory` (a logger's save_dir) to the store, at the
    same relative path under PREFIX; returns the count. Files are rewritten whole: a
    later upload of the same attempt replaces the earlier one."""
    count = 0
    if not directory.is_dir():
        return 0
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = f"{PREFIX}/{path.relative_to(directory).as_posix()}"
        if is_key(key):
            store.put_file(key, path)
            count += 1
    return count
