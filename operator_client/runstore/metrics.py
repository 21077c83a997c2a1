"""The run's metrics log across restarts.

Lightning's CSVLogger starts a new file in every attempt, so after a resume its file only
has the rows since the restart. Rank 0 keeps the earlier rows (from the store's
`metrics/metrics.csv`, up to the resumed step) and publishes history + current as one log.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

KEY = "metrics/metrics.csv"


def _read(path: Path | None) -> tuple[list[str], list[dict[str, str]]]:
    if path is None or not path.is_file():
        return [], []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get("step") or "nan")
    except ValueError:
        return float("nan")


def merge(history: Path | None, current: Path | None, out: Path, upto: int) -> Path | None:
    """Write history rows logged at or before step `upto` (and before the first current
    row), then every current row, to `out`; columns are the union. None when both are empty."""
    old_fields, old_rows = _read(history)
    new_fields, new_rows = _read(current)
    first_new = min((_step(r) for r in new_rows), default=float("inf"))
    kept = [r for r in old_rows if _step(r) <= upto and _step(r) < first_new]
    fields = old_fields + [f for f in new_fields if f not in old_fields]
    if not fields:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    with os.fdopen(fd, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fields, restval="")
        writer.writeheader()
        writer.writerows(kept)
        writer.writerows(new_rows)
    os.replace(tmp, out)
    return out
