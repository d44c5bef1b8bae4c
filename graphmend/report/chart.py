"""A PNG chart of what a fix buys: graph breaks and latency before/after per target.

matplotlib with the Agg backend (no display needed); imported only when a chart is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from graphmend.bench.results import BenchPoint, BenchReport
from graphmend.verify.results import VerifyReport

__all__ = ["write_chart"]

BEFORE, AFTER = "#b0b7c3", "#2f7ed8"


def write_chart(path: Path | str, verify_report: Optional[VerifyReport] = None, bench_report: Optional[BenchReport] = None,
                title: str = "GraphMend: before vs after") -> Path:
    """Write the chart to ``path`` (a .png) and return it. Panels: breaks (from verify),
    cold start and steady state (from bench, first batch size of each target), and the two
    ratios with their intervals, marked by verdict."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    panels = []
    if verify_report is not None:
        rows = [(t.name, t.breaks_before, t.breaks_after) for t in verify_report.targets
                if t.breaks_before is not None and t.breaks_after is not None]
        if not rows:
            rows = [(t.name, t.graphs_before, t.graphs_after) for t in verify_report.targets
                    if t.graphs_before is not None and t.graphs_after is not None]
            label = "graphs"
        else:
            label = "graph breaks"
        if rows:
            panels.append((label, rows, "count"))
    if bench_report is not None:
        cold = [(t.name, t.points[0].before.cold_start_s, t.points[0].after.cold_start_s) for t in bench_report.targets if t.points]
        steady = [(t.name, t.points[0].before.steady_s * 1000, t.points[0].after.steady_s * 1000) for t in bench_report.targets if t.points]
        if cold:
            panels.append(("cold start (first call, with compilation)", cold, "seconds"))
            panels.append(("steady state (median call)", steady, "milliseconds"))
            panels.append((f"speedup (before ÷ after), {bench_report.confidence:.0%} interval",
                           [(t.name, t.points[0]) for t in bench_report.targets if t.points], "ratio"))
    if not panels:
        raise ValueError("nothing to chart: no counts in the verify report and no points in the bench report")

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (name, rows, unit) in zip(axes[0], panels):
        if unit == "ratio":
            _ratio_panel(ax, name, rows)
            continue
        labels = [r[0] for r in rows]
        xs = range(len(rows))
        width = 0.38
        ax.bar([x - width / 2 for x in xs], [r[1] for r in rows], width, label="before", color=BEFORE)
        ax.bar([x + width / 2 for x in xs], [r[2] for r in rows], width, label="after", color=AFTER)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import io

    from graphmend import fsutil

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    fsutil.write_bytes(path, png.getvalue())
    plt.close(fig)
    return path


MARKERS = {"faster": ("o", "#2a9d47"), "slower": ("v", "#c4352b"), "no-change": ("s", "#7a8291")}


def _ratio_panel(ax: Any, name: str, rows: list[tuple[str, BenchPoint]]) -> None:
    """Each target's cold start and steady state ratio as a point with its interval (none when
    the rounds were too few), shaped and coloured by verdict, against the line of no change."""
    ax.axhline(1.0, color="#444444", linewidth=0.8, linestyle="--")
    for i, (_, p) in enumerate(rows):
        for offset, ratio, ci, verdict, label in ((-0.15, p.cold_start_ratio, p.cold_start_ci, p.cold_start_verdict, "cold start"),
                                                   (0.15, p.steady_ratio, p.steady_ci, p.steady_verdict, "steady state")):
            marker, colour = MARKERS.get(verdict, MARKERS["no-change"])
            err = [[ratio - ci[0]], [ci[1] - ratio]] if ci else None
            ax.errorbar([i + offset], [ratio], yerr=err, fmt=marker, color=colour, capsize=3, markersize=5,
                        markerfacecolor=colour if label == "steady state" else "white")
    # Ratios on a log axis (2× faster and 2× slower equally far from 1), limited to 0.1×–10×:
    # a noisy interval of 0.01–800× would otherwise flatten every other point onto the line.
    ax.set_yscale("log")
    ax.set_ylim(0.1, 10.0)
    ax.set_yticks([0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0])
    ax.set_yticklabels(["0.1", "0.25", "0.5", "1", "2", "4", "10"], fontsize=7)
    ax.set_xticks(list(range(len(rows))))
    ax.set_xticklabels([r[0] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_title(name + "\n(hollow: cold start, filled: steady; ● faster ▼ slower ■ no change)", fontsize=8)
    ax.set_ylabel("× (above 1: faster after)", fontsize=8)
