"""The report's PNG: training curves, GPU utilisation, the goodput breakdown per rank,
each attempt's timeline and the checkpoint saves, drawn with matplotlib, headless (Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runstore.goodput import CATEGORIES

if TYPE_CHECKING:
    from .report import Report


def _colour(category: str) -> Any:
    """One colour per category, the same in every panel."""
    from matplotlib import colormaps

    return colormaps["tab20"](CATEGORIES.index(category) if category in CATEGORIES else 19)


def plot(report: Report, path: Path) -> Path:
    """Training curves (and GPU utilisation when recorded) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    heights = [4.0] * (1 + bool(report.gpu)) + [4.0, 3.0] * bool(report.goodput)
    heights += [4.0] * bool(report.saves)
    fig, axes = plt.subplots(
        len(heights),
        1,
        figsize=(9, sum(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    curves = axes[0][0]
    for name, series in sorted(report.metrics.items()):
        marker = "o" if len(series.steps) < 30 else None
        curves.plot(series.steps, series.values, label=name, marker=marker, markersize=3)
    if report.best:
        curves.axvline(report.best["step"], color="grey", linestyle=":", label="best checkpoint")
    curves.set_xlabel("step")
    curves.set_title(f"{report.name}: training curves")
    if report.metrics and all(v > 0 for s in report.metrics.values() for v in s.values):
        curves.set_yscale("log")
    if report.metrics:
        curves.legend()
    else:
        curves.text(0.5, 0.5, "no metrics logged", ha="center", transform=curves.transAxes)
    if report.gpu:
        util = axes[1][0]
        for gpu, (times, utils) in sorted(report.gpu.items()):
            util.plot(times, utils, label=gpu, marker=".")
        for i, at in enumerate(report.gpu_restarts):
            util.axvline(at, color="grey", linestyle=":", label="restart" if i == 0 else None)
        util.set_xlabel("seconds (every attempt)")
        util.set_ylabel("GPU utilisation %")
        util.set_ylim(0, 100)
        util.legend()
    if report.goodput:
        _goodput_bars(axes[-2 - bool(report.saves)][0], report.goodput)
        _attempt_timeline(axes[-1 - bool(report.saves)][0], report.goodput)
    if report.saves:
        stalls = axes[-1][0]
        steps = [float(r["step"]) for r in report.saves]
        stalls.bar(steps, [float(r["stall_s"]) for r in report.saves], width=max(steps) / 80 or 1)
        stalls.set_xlabel("step")
        stalls.set_ylabel("seconds training stalled")
        stalls.set_title("checkpoint saves: training-thread stall per save")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _goodput_bars(axis: Any, goodput: dict[str, Any]) -> None:
    """One stacked bar per rank: its seconds in each category."""
    ranks = goodput["ranks"]
    labels = [f"rank {r['rank']}" for r in ranks]
    left = [0.0] * len(ranks)
    for name in [c for c in CATEGORIES if c in goodput["categories"]]:
        widths = [r["categories"].get(name, 0.0) for r in ranks]
        if any(w > 0 for w in widths):
            axis.barh(labels, widths, left=left, label=name.replace("_", " "), color=_colour(name))
            left = [a + w for a, w in zip(left, widths, strict=True)]
    axis.set_xlabel("seconds")
    axis.set_title(f"goodput {goodput['goodput']:.1%}: where each rank's time went")
    axis.legend(fontsize="small", ncol=3)


def _attempt_timeline(axis: Any, goodput: dict[str, Any]) -> None:
    """The job on one time axis: a bar per attempt from its first event to its last,
    split into its ranks' mean time in each category (in the order they happen), the
    gaps between attempts (recovery) hatched, each restart marked."""
    ranks = max(1, len(goodput["ranks"]))
    before = ("pending", "queued", "image_pull", "container_start")
    order = [c for c in CATEGORIES if c not in (*before, "recovery", "idle_at_end")]
    labelled: set[str] = set()
    first = goodput["attempts"][0]["start_s"] if goodput["attempts"] else 0.0
    # Before the first attempt's first process: the pods' waits, in their shares.
    waits = {c: goodput["categories"].get(c, 0.0) for c in before}
    left, total = 0.0, sum(waits.values())
    for name, seconds in waits.items():
        if seconds > 0 and total > 0:
            width = first * seconds / total
            axis.barh(
                0, width, left=left, color=_colour(name), label=name.replace("_", " "), height=0.6
            )
            labelled.add(name)
            left += width
    previous_end = None
    for a in goodput["attempts"]:
        left = a["start_s"]
        for name in order:
            width = a["categories"].get(name, 0.0) / ranks
            if width > 0:
                label = None if name in labelled else name.replace("_", " ")
                labelled.add(name)
                axis.barh(0, width, left=left, color=_colour(name), label=label, height=0.6)
                left += width
        if previous_end is not None:
            axis.barh(
                0, a["start_s"] - previous_end, left=previous_end, height=0.6, fill=False,
                hatch="//", edgecolor=_colour("recovery"),
                label=None if "recovery" in labelled else "recovery",
            )  # fmt: skip
            labelled.add("recovery")
            axis.axvline(a["start_s"], color="black", linestyle="--", linewidth=1)
            axis.annotate(
                f"restart: attempt {a['attempt']}",
                (a["start_s"], 0.35),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize="small",
            )
        previous_end = a["end_s"]
    axis.set_yticks([])
    axis.set_xlim(left=0)
    axis.set_ylim(-1.6, 0.7)  # room below the bar for the legend
    axis.set_xlabel("seconds since the job's first event (mean over ranks)")
    axis.set_title(f"the job over time: {len(goodput['attempts'])} attempt(s)")
    if labelled:
        axis.legend(fontsize="small", ncol=4, loc="lower right")
