"""GPU monitor files: one CSV per node and attempt (`monitor/node-%05d-attempt-%04d.csv`,
written by the runtime's sampler, runtime/gpu_monitor.py: a restarted or resumed job keeps
every attempt's samples) and `monitor/summary.csv`, the mean and max of each metric per
GPU over all attempts, that rank 0 writes at the end."""

from __future__ import annotations

import csv
import io
import re
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


# A node's file of one attempt; files without the attempt are from before attempts were kept.
_NODE_FILE = re.compile(r"node-(\d+)(?:-attempt-(\d+))?\.csv")


def node_key(node_rank: int, attempt: int) -> str:
    return join_key(PREFIX, f"node-{node_rank:05d}-attempt-{attempt:04d}.csv")


def parse_node_file(name: str) -> tuple[int, int] | None:
    """(node, attempt) of a monitor file's name (attempt 0: written before attempts were
    kept apart); None for any other file."""
    found = _NODE_FILE.fullmatch(name)
    return (int(found[1]), int(found[2] or 0)) if found else None


def to_csv(rows: Iterable[dict[str, Any]], fields: list[str] = FIELDS) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fields)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def summarize(node_csvs: dict[int, list[str]]) -> list[dict[str, Any]]:
    """Mean and max of each metric per (node, GPU), over every attempt's samples."""
    out = []
    for node, texts in sorted(node_csvs.items()):
        per_gpu: dict[int, list[dict[str, str]]] = {}
        for text in texts:
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
    nodes: dict[int, list[str]] = {}
    for o in store.list(PREFIX + "/node-"):
        found = parse_node_file(o.key.rsplit("/", 1)[-1])
        if found is not None:
            nodes.setdefault(found[0], []).append(store.get_bytes(o.key).decode())
    rows = summarize(nodes)
    if rows:
        store.put_bytes(SUMMARY, to_csv(rows, list(rows[0])).encode())
    return len(rows)
