"""GPU monitor files: one CSV per node (`monitor/node-%05d.csv`, written by the
runtime's sampler, runtime/gpu_monitor.py) and `monitor/summary.csv`, the mean and max of
each metric per GPU that rank 0 writes at the end."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from ..storage import ObjectStore, join_key

PREFIX = "monitor"
SUMMARY = join_key(PREFIX, "summary.csv")
FIELDS = [
    "time",
    "gpu",
    "utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "power_w",
    "temperature_c",
]
METRICS = FIELDS[2:]


def node_key(node_rank: int) -> str:
    return join_key(PREFIX, f"node-{node_rank:05d}.csv")


def to_csv(rows: Iterable[dict[str, Any]], fields: list[str] = FIELDS) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fields)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def summarize(node_csvs: dict[int, str]) -> list[dict[str, Any]]:
    """Mean and max of each metric per (node, GPU)."""
    out = []
    for node, text in sorted(node_csvs.items()):
        per_gpu: dict[int, list[dict[str, str]]] = {}
        for row in csv.DictReader(io.StringIO(text)):
            per_gpu.setdefault(int(row["gpu"]), []).append(row)
        for gpu, rows in sorted(per_gpu.items()):
            summary: dict[str, Any] = {"node": node, "gpu": gpu, "samples": len(rows)}
            for metric in METRICS:
                values = [float(r[metric]) for r in rows]
                summary[f"{metric}_mean"] = round(sum(values) / len(values), 3)
                summary[f"{metric}_max"] = round(max(values), 3)
            out.append(summary)
    return out


def write_summary(store: ObjectStore) -> int:
    """Write monitor/summary.csv from every node's samples; returns the GPUs summarized."""
    nodes = {
        int(o.key.rsplit("-", 1)[1].removesuffix(".csv")): store.get_bytes(o.key).decode()
        for o in store.list(PREFIX + "/node-")
    }
    rows = summarize(nodes)
    if rows:
        store.put_bytes(SUMMARY, to_csv(rows, list(rows[0])).encode())
    return len(rows)
