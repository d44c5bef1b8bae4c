"""The human report, shaped like ruff's: ``path:line:col: CODE category: message [fixable (GMxxx)]``.

Columns are shown 1-based (the model keeps libcst's 0-based columns).
"""

from __future__ import annotations

from graphmend.model import CheckReport, GraphBreak, TargetResult
from graphmend.report import break_code, lever_note, sort_breaks


def _environment(t: TargetResult) -> str:
    env = t.environment
    parts = [f"torch {env.torch_version}" if env.torch_version else "torch ?", env.device, env.dtype, env.backend, env.mode]
    return ", ".join(p for p in parts if p)


def format_break(b: GraphBreak) -> str:
    col = f"{b.col + 1}:" if b.col is not None else ""
    line = f"{b.file}:{b.line}:{col} {break_code(b)}"
    if b.gb_id or b.rule:
        line += f" {b.category.value}"
    line += f": {' '.join(b.reason.split())}"  # one finding, one line
    line += lever_note(b)
    notes = []
    if b.hits > 1:
        notes.append(f"{b.hits} hits")
    if b.outside_paths:
        notes.append("outside paths")
    if not b.verified:
        notes.append("unverified")
    if notes:
        line += f" ({', '.join(notes)})"
    return line


def render_text(report: CheckReport) -> str:
    out: list[str] = []
    for t in sorted(report.targets, key=lambda t: t.name):
        if t.error:
            out.append(f"target {t.name}: error: {' '.join(t.error.split())}")
            continue
        skipped = f", {t.skipped_frames} skipped frames" if t.skipped_frames else ""
        out.append(f"target {t.name}: {t.graph_count} graphs, {t.break_count} breaks{skipped} ({_environment(t)})")
        out.extend(format_break(b) for b in sort_breaks(t.breaks))
    if report.static:
        out.append("static candidates (unverified: found by reading the source, no target run):")
        out.extend(format_break(b) for b in sort_breaks(report.static))
    for e in sorted(report.errors, key=lambda e: (e.path, e.message)):
        out.append(f"{e.path}: error: {' '.join(e.message.split())}")
    out.append(_summary(report))
    return "\n".join(out) + "\n"


def _summary(report: CheckReport) -> str:
    dynamic = sum(len(t.breaks) for t in report.targets)
    ran = [t for t in report.targets if not t.error]
    failed = len(report.targets) - len(ran)
    fixable = sum(1 for b in report.all_breaks if b.fixable)
    parts = []
    if report.targets:
        parts.append(f"{dynamic} graph break{'s' if dynamic != 1 else ''} in {len(ran)} target{'s' if len(ran) != 1 else ''}")
    parts.append(f"{len(report.static)} static candidate{'s' if len(report.static) != 1 else ''}")
    if failed:
        parts.append(f"{failed} target{'s' if failed != 1 else ''} failed")
    if report.errors:
        parts.append(f"{len(report.errors)} file error{'s' if len(report.errors) != 1 else ''}")
    if not report.all_breaks and not report.failed:
        return "All clear: no graph breaks found (" + "; ".join(parts) + ")."
    return "Found " + "; ".join(parts) + f"; {fixable} fixable."
