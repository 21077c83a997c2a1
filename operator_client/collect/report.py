"""`kctl-train report`: training curves (PNG) and a short text summary of a collected run.

Reads only the collected directory: summary.json, metrics/metrics.csv (Lightning's CSV
log: one row per logging step, empty cells for metrics not logged at that step),
metrics/checkpoints.csv (each save's stall and write times), monitor/node-*.csv,
attempts/ and _SUCCESS. report_plot.py draws the PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KctlTrainError
from ..runstore import checkpoint_log, monitor, runinfo
from ..runstore.documents import Document
from ..runstore.goodput import CATEGORIES, Preemption
from ..runstore.metrics import KEY as METRICS_KEY
from ..spec.model import TrainingJob
from ..untrusted import csv_rows, read_json
from .collect import SUMMARY
from .report_plot import plot

PNG, TEXT = "report.png", "report.txt"
# A rank whose median step time is this many times the fastest rank's is named.
STRAGGLER = 1.2


class ReportError(KctlTrainError):
    """The directory is not a collected run; the message says what is missing."""


@dataclass
class Series:
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass
class Report:
    name: str
    metrics: dict[str, Series]
    # "node N gpu G" -> (seconds since the first sample, util %), every attempt's samples on
    # one time axis (a gap where the job was restarting)
    gpu: dict[str, tuple[list[float], list[float]]]
    final: dict[str, float]
    best: dict[str, Any] | None
    wall_seconds: float | None  # the job's, from start to completion
    train_seconds: float | None  # first attempt claimed to the _SUCCESS marker
    restarts: int
    complete: bool
    step: int | None
    outputs: dict[str, int]
    checkpoint: str | None
    saves: list[dict[str, str]] = field(default_factory=list)  # metrics/checkpoints.csv
    gpu_restarts: list[float] = field(default_factory=list)  # seconds, on the GPU time axis
    ignored: list[str] = field(default_factory=list)  # files passed over, and why
    # summary.json's goodput account (runstore/goodput.py), None where none was recorded
    goodput: dict[str, Any] | None = None
    # SIGTERM to SIGKILL as the run's pods had it (run.json's spec: the grace period, cut
    # to the spot notice on spot nodes), where known
    save_window: int | None = None


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _rows(path: Path, ignored: list[str]) -> list[dict[str, str]]:
    """A CSV's rows ([] when it is missing, or not a CSV kctl-train reads: then why, in
    `ignored`). The files come from the pods."""
    try:
        return list(csv_rows(path))
    except FileNotFoundError:
        return []
    except OSError as exc:
        ignored.append(str(exc))
        return []


def read_metrics(path: Path, ignored: list[str]) -> dict[str, Series]:
    """Each metric column of Lightning's CSV log as (step, value) points."""
    series: dict[str, Series] = {}
    for row in _rows(path, ignored):
        step = _float(row.get("step"))
        if step is None:
            continue
        for name, text in row.items():
            value = _float(text)
            if name in ("step", "epoch") or value is None:
                continue
            s = series.setdefault(name, Series())
            s.steps.append(step)
            s.values.append(value)
    return series


def _gpu_series(
    directory: Path, ignored: list[str]
) -> tuple[dict[str, tuple[list[float], list[float]]], list[float]]:
    """Every node's GPU utilisation over every attempt, on one time axis (seconds since
    the first sample), and when each later attempt's samples began (its restart). The
    files come from the pods: a row that is not numbers is passed over."""
    samples: list[tuple[int, int, float, str, float]] = []  # node, attempt, time, gpu, util
    for path in sorted((directory / monitor.PREFIX).glob("node-*.csv")):
        found = monitor.parse_node_file(path.name)
        if found is None:
            continue
        for row in _rows(path, ignored):
            at, util = _float(row.get("time")), _float(row.get("utilization_pct"))
            if at is not None and util is not None:
                samples.append((*found, at, str(row.get("gpu")), util))
    if not samples:
        return {}, []
    start = min(s[2] for s in samples)
    out: dict[str, tuple[list[float], list[float]]] = {}
    begun: dict[int, float] = {}
    for node, attempt, at, gpu, util in sorted(samples):
        series = out.setdefault(f"node {node} gpu {gpu}", ([], []))
        series[0].append(at - start)
        series[1].append(util)
        begun[attempt] = min(begun.get(attempt, at - start), at - start)
    restarts = sorted(at for attempt, at in begun.items() if attempt != min(begun))
    return out, restarts


def _monitored(metrics: dict[str, Series]) -> str | None:
    """The metric that ranks checkpoints: a validation loss if logged, else any loss."""
    losses = sorted(n for n in metrics if "loss" in n)
    validation = [n for n in losses if n.startswith("val")]
    ranked = validation or losses
    return ranked[0] if ranked else None


def _value_at(series: Series, step: float) -> float | None:
    """The last value logged at or before a step."""
    value = None
    for s, v in zip(series.steps, series.values, strict=True):
        if s <= step:
            value = v
    return value


def build(directory: Path) -> Report:
    """Everything the report shows, from a collected directory."""
    summary_path = directory / SUMMARY
    if not summary_path.is_file():
        raise ReportError(
            f"{directory} is not a collected run (no {SUMMARY}); run `kctl-train collect` first"
        )
    try:
        summary = read_json(summary_path)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{summary_path}: not a summary kctl-train wrote ({exc})") from None
    if not isinstance(summary, dict):
        raise ReportError(f"{summary_path}: not a summary kctl-train wrote (not an object)")
    ignored: list[str] = []
    metrics = read_metrics(directory / METRICS_KEY, ignored)
    final = {name: s.values[-1] for name, s in sorted(metrics.items()) if s.values}
    monitored = _monitored(metrics)
    best = _recorded_best(summary.get("best"))  # by checkpoint.monitor, as each recorded it
    if best is None and monitored:
        ranked = [
            (value, step)
            for step in map(int, _numbers(summary.get("committedCheckpoints")))
            if (value := _value_at(metrics[monitored], step)) is not None
        ]
        if ranked:
            value, step = min(ranked)
            best = {"step": step, "metric": monitored, "value": value}
    claimed = _claimed(sorted((directory / runinfo.ATTEMPTS).glob("*.json")), ignored)
    success: dict[str, Any] = _object(summary.get("success"))
    train = None
    finished = _number(success.get("finished"))
    if claimed and finished is not None:
        train = finished - min(claimed)
    job: dict[str, Any] = _object(summary.get("job"))
    wall = None
    started, completed = _number(job.get("started")), _number(job.get("completed"))
    if started is not None and completed is not None:
        wall = completed - started
    checkpoints = [c for c in _list(summary.get("checkpoints")) if isinstance(c, dict)]
    path = checkpoints[0].get("path") if checkpoints else None
    gpu, gpu_restarts = _gpu_series(directory, ignored)
    return Report(
        name=str(job.get("name") or directory.name),
        metrics=metrics,
        gpu=gpu,
        gpu_restarts=gpu_restarts,
        final=final,
        best=best,
        wall_seconds=wall,
        train_seconds=train,
        restarts=int(_number(summary.get("restarts")) or 0),
        complete=summary.get("complete") is True,
        step=int(done) if (done := _number(success.get("step"))) is not None else None,
        outputs={
            str(k): int(_number(_object(v).get("rows")) or 0)
            for k, v in _object(summary.get("outputs")).items()
        },
        checkpoint=path if isinstance(path, str) else None,
        saves=_saves(directory / checkpoint_log.KEY, ignored),
        ignored=ignored,
        goodput=_goodput(summary.get("goodput")),
        save_window=_save_window(directory / runinfo.RUN_JSON),
    )


def _recorded_best(value: Any) -> dict[str, Any] | None:
    """summary.json's best checkpoint, when it has the shape collect writes."""
    found = _object(value)
    step, score = _number(found.get("step")), _number(found.get("value"))
    metric = found.get("metric")
    if step is None or score is None or not isinstance(metric, str):
        return None
    return {"step": int(step), "metric": metric, "value": score}


def _save_window(run_json: Path) -> int | None:
    """SIGTERM to SIGKILL as the pods of run.json's spec saw it: the grace period, cut to
    the spot notice on spot nodes (None: no run.json, or not a job kctl-train wrote)."""
    try:
        job = TrainingJob.model_validate(_object(read_json(run_json)).get("spec"))
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None
    return job.spec.save_window_seconds


def _goodput(value: Any) -> dict[str, Any] | None:
    """summary.json's goodput, when it has the shape collect writes (the summary is ours,
    but a person may have edited it)."""
    found = _object(value)
    categories = _number_map(found.get("categories"))
    total = _number(found.get("total_s"))
    if not categories or total is None:
        return None
    ranks = [r for r in _list(found.get("ranks")) if isinstance(r, dict)]
    attempts = [
        {
            "attempt": a.get("attempt"),
            "start_s": _number(a.get("start_s")) or 0.0,
            "end_s": _number(a.get("end_s")) or 0.0,
            "resumed_from": _number(a.get("resumed_from")),
            "reached": _number(a.get("reached")),
            "wasted_steps": _number(a.get("wasted_steps")) or 0,
            "categories": _number_map(a.get("categories")),
            "preemption": a.get("preemption"),  # Preemption.from_json checks it where read
        }
        for a in _list(found.get("attempts"))
        if isinstance(a, dict)
    ]
    return {
        "attempts": attempts,
        "total_s": total,
        "wall_s": _number(found.get("wall_s")) or 0.0,
        "goodput": _number(found.get("goodput")) or 0.0,
        "categories": categories,
        "ranks": [
            {
                "rank": r.get("rank"),
                "categories": _number_map(r.get("categories")),
                "straggler": _number(r.get("straggler")),
            }
            for r in ranks
        ],
    }


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number_map(value: Any) -> dict[str, float]:
    """The entries of an object that are finite numbers (the rest dropped)."""
    return {k: n for k, v in _object(value).items() if (n := _number(v)) is not None}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _numbers(value: Any) -> list[float]:
    return [n for v in _list(value) if (n := _number(v)) is not None]


def _number(value: Any) -> float | None:
    """A finite number from a document a pod wrote (None for anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    return _float(str(value))


def _claimed(paths: list[Path], ignored: list[str]) -> list[float]:
    """When each attempt claimed the run, from its file (a pod's: one of another shape is
    passed over, why in `ignored`)."""
    claimed = []
    for path in paths:
        try:
            doc = Document(read_json(path), str(path))
            if doc.has("claimed"):
                claimed.append(doc.number("claimed"))
        except (OSError, ValueError) as exc:
            ignored.append(str(exc))
    return claimed


def _saves(path: Path, ignored: list[str]) -> list[dict[str, str]]:
    """Each save's row, with its stall and write times readable as numbers."""
    rows = _rows(path, ignored)
    numbers = ("step", "stall_s", "write_s", "commit_s", "skipped_before")
    return [r for r in rows if all(_float(r.get(k)) is not None for k in numbers)]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def text(report: Report) -> str:
    """The short text summary."""
    state = "finished" if report.complete else "not finished (no _SUCCESS marker)"
    lines = [f"{report.name}: {state}" + (f" at step {report.step}" if report.step else "")]
    rows: list[tuple[str, str]] = []
    if report.wall_seconds is not None:
        rows.append(("wall time", _duration(report.wall_seconds)))
    if report.train_seconds is not None:
        rows.append(("training time", f"{_duration(report.train_seconds)} (first attempt to end)"))
    rows.append(("restarts", str(report.restarts)))
    rows.extend((f"final {name}", f"{value:.6g}") for name, value in report.final.items())
    if report.best:
        b = report.best
        rows.append(("best checkpoint", f"step {b['step']} ({b['metric']} {b['value']:.6g})"))
    if report.checkpoint:
        rows.append(("collected", report.checkpoint))
    rows.extend((f"outputs/{s}", f"{n} rows") for s, n in sorted(report.outputs.items()))
    if report.saves:
        stalls = [float(r["stall_s"]) for r in report.saves]
        writes = [float(r["write_s"]) for r in report.saves]
        skipped = sum(int(float(r["skipped_before"])) for r in report.saves)
        mean_stall, mean_write = sum(stalls) / len(stalls), sum(writes) / len(writes)
        rows.append(
            (
                "checkpoint stall",
                f"mean {mean_stall:.3f}s, max {max(stalls):.3f}s over {len(stalls)} saves "
                f"(written in the background in {mean_write:.2f}s on average; {skipped} skipped)",
            )
        )
        emergency = [r for r in report.saves if r.get("emergency") == "1"]
        if emergency:
            seconds = checkpoint_log.save_seconds(emergency[-1]) or 0.0
            step = emergency[-1]["step"]
            rows.append(("emergency save", f"step {step}: committed {seconds:.2f}s after the stop"))
        budget = checkpoint_log.budget(report.saves)
        if budget is not None:
            rows.append(("preemption", budget.against(report.save_window)))
    for gpu, (_, utils) in sorted(report.gpu.items()):
        rows.append((f"{gpu} util", f"mean {sum(utils) / len(utils):.0f}%, max {max(utils):.0f}%"))
    if not report.gpu:
        rows.append(("GPU utilisation", "not recorded (no GPU, or monitoring off)"))
    rows.extend(("ignored", why) for why in report.ignored)
    width = max(len(label) for label, _ in rows) + 2
    lines += [f"  {label:<{width}}{value}" for label, value in rows]
    return "\n".join(lines + goodput_table(report.goodput)) + "\n"


def goodput_table(goodput: dict[str, Any] | None) -> list[str]:
    """Where every rank-second went: each category with time in it, and the stragglers."""
    if goodput is None:
        return ["  goodput: not recorded (a run of an older kctl-train, or a command job)"]
    total, ranks = goodput["total_s"], len(goodput["ranks"])
    lines = [
        f"  goodput {goodput['goodput']:.1%} of {total:.1f} rank-seconds "
        f"({ranks} ranks x {_duration(goodput['wall_s'])}):"
    ]
    known = [c for c in CATEGORIES if c in goodput["categories"]]
    for name in known + sorted(set(goodput["categories"]) - set(known)):
        seconds = goodput["categories"][name]
        if abs(seconds) >= 0.0005:
            share = seconds / total if total else 0.0
            lines.append(f"    {name.replace('_', ' '):<18}{seconds:>10.1f}s {share:>7.1%}")
    for a in goodput["attempts"]:
        lines.append(f"    {_attempt_line(a)}")
    slow = [r for r in goodput["ranks"] if (r["straggler"] or 0) >= STRAGGLER]
    for r in slow:
        lines.append(
            f"    straggler: rank {r['rank']}, {r['straggler']:.2f}x the fastest step time"
        )
    return lines


def _attempt_line(a: dict[str, Any]) -> str:
    """One attempt of the account: when, from which step to which, what was redone."""
    steps = (
        f"steps {a['resumed_from']:.0f} to {a['reached']:.0f}"
        if a["resumed_from"] is not None and a["reached"] is not None
        else "no step trained"
    )
    redone = f", {a['wasted_steps']:.0f} redone by the next" if a["wasted_steps"] else ""
    stopped = Preemption.from_json(a.get("preemption"))
    sigterm = f"; {stopped.words()}" if stopped else ""
    return (
        f"attempt {a['attempt']}: {a['start_s']:.1f}s to {a['end_s']:.1f}s, {steps}{redone}"
        f"{sigterm}"
    )


def write(directory: Path) -> tuple[Report, Path, Path]:
    """Build the report of a collected directory; write report.png and report.txt there."""
    report = build(directory)
    png = plot(report, directory / PNG)
    txt = directory / TEXT
    txt.write_text(text(report))
    return report, png, txt
