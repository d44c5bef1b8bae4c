"""The demo: GraphMend's whole pipeline on the bundled ``examples/`` repository.

check → fix → verify → bench, on a COPY of the examples (a fresh git repository in the output
folder), so the bundled files never change. Every stage writes its artifacts (JSON, markdown, a
PNG chart, the diff) into the output folder and prints a short readable summary; progress goes
to stderr. Nothing here needs a network or a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from graphmend import fsutil
from graphmend.config import Config, load_config
from graphmend.model import CheckReport, Decline, to_dict

if TYPE_CHECKING:
    from graphmend.bench.results import BenchReport
    from graphmend.fix import FixReport
    from graphmend.verify.results import VerifyReport

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    out: Path
    breaks_before: int
    breaks_after: int
    fixes_applied: int
    verified: bool
    failed: bool


def _git(root: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="graphmend demo", GIT_AUTHOR_EMAIL="demo@graphmend.invalid",
               GIT_COMMITTER_NAME="graphmend demo", GIT_COMMITTER_EMAIL="demo@graphmend.invalid")
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def prepare_repository(source: Path, out: Path) -> Path:
    """A git repository at ``out/repo`` holding a copy of ``source`` in one commit."""
    repo = out / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(source, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "workflows"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "examples as bundled")
    return repo


def _write(out: Path, name: str, text: str) -> None:
    fsutil.write_text(out / name, text if text.endswith("\n") else text + "\n")


def run_demo(out: Path, *, source: Path = EXAMPLES, bench: bool = True, say: Say = print,
             progress: Optional[Say] = None) -> DemoResult:
    from graphmend.detect.dynamic import reusing_runs

    # check, fix and verify run the same targets on the same trees (the copy fix edits starts as
    # the tree check ran; verify counts graphs on the tree before and the tree fix wrote): once each.
    with reusing_runs():
        return _run_demo(out, source=source, bench=bench, say=say, progress=progress)


def _run_demo(out: Path, *, source: Path, bench: bool, say: Say, progress: Optional[Say]) -> DemoResult:
    from graphmend.bench import bench as run_bench
    from graphmend.bench.stats import MIN_ROUNDS
    from graphmend.check import check
    from graphmend.fix import apply_fixes
    from graphmend.report import render_check
    from graphmend.report.chart import write_chart
    from graphmend.report.markdown_verify import (
        render_bench_markdown, render_bench_text, render_verify_markdown, render_verify_text,
    )
    from graphmend.verify import verify

    out.mkdir(parents=True, exist_ok=True)
    repo = prepare_repository(source, out)
    config = load_config(repo)
    note = progress or (lambda message: print(message, file=sys.stderr, flush=True))

    def stage(title: str) -> float:
        note(f"== {title}")
        return time.monotonic()

    # 1. check: what breaks, where, and which lever removes it.
    started = stage("check: running every target under Dynamo, then the static pass")
    report = check(config)
    _write(out, "check.txt", render_check(report, "text"))
    _write(out, "check.json", render_check(report, "json"))
    _write(out, "check.sarif", render_check(report, "sarif"))
    breaks_before = sum(t.break_count for t in report.targets)
    say(f"check   {breaks_before} graph breaks on {len(report.targets)} targets "
        f"({sum(1 for b in report.all_breaks if b.fixable)} fixable by a rule), "
        f"{len(report.static)} static candidates  [{time.monotonic() - started:.0f} s]")
    for t in report.targets:
        state = f"error: {t.error}" if t.error else f"{t.graph_count} graphs, {t.break_count} breaks"
        say(f"        {t.name:<14} {state}")

    # 2. fix: rewrite the copy; the diff is what a user would review.
    started = stage("fix: rewriting the fixable breaks, re-detecting after each round")
    fixed = apply_fixes(config, write=True, progress=note)
    diff = "".join(change.diff for change in fixed.changes)
    _write(out, "fix.diff", diff)
    _write(out, "fix.json", json.dumps(to_dict(fixed), indent=2, sort_keys=True))
    breaks_after = sum(t.breaks_after for t in fixed.targets)
    say(f"fix     {len(fixed.applied)} fixes applied in {len(fixed.changes)} files, {len(fixed.declined)} declined; "
        f"breaks {breaks_before} -> {breaks_after}  [{time.monotonic() - started:.0f} s]")
    for t in fixed.targets:
        say(f"        {t.name:<14} " + (f"error: {t.error}" if t.error else
                                       f"graphs {t.graphs_before} -> {t.graphs_after}, breaks {t.breaks_before} -> {t.breaks_after}"))
    for line in leftover_lines(fixed):
        say(f"        {line}")

    # 3. verify: the fixed working tree against the commit it started from.
    started = stage("verify: original vs fixed, same weights, same inputs, eager and compiled")
    names, skipped = verify_plan(report, fixed)
    verified = verify(config, names or None, base="HEAD", progress=note)
    _write(out, "verify.json", json.dumps(to_dict(verified), indent=2, sort_keys=True))
    _write(out, "verify.md", render_verify_markdown(verified))
    say(render_verify_text(verified).rstrip() + f"  [{time.monotonic() - started:.0f} s]")
    if skipped:
        say(f"        {skipped}")

    # 4. bench: what the fixes buy, as before/after ratios with intervals, measured in one run.
    bench_report = None
    if bench:
        started = stage("bench: fresh processes per arm, interleaved; cold start and steady state with their intervals")
        bench_config, names, note_line = bench_plan(config, fixed)
        say(f"bench   {note_line}")
        if names:
            # The fewest rounds that give an interval (its ends are then the extreme pairwise
            # ratios: a verdict other than no-change needs every pairing to agree), to keep the demo short.
            bench_report = run_bench(bench_config.replace_section("bench", warmup=2, repeat=10), names, base="HEAD",
                                     progress=note, rounds=MIN_ROUNDS)
            _write(out, "bench.json", json.dumps(to_dict(bench_report), indent=2, sort_keys=True))
            _write(out, "bench.md", render_bench_markdown(bench_report))
            say(render_bench_text(bench_report).rstrip() + f"  [{time.monotonic() - started:.0f} s]")

    say(overall_line(fixed, verified, bench_report))

    try:
        write_chart(out / "chart.png", verified, bench_report)
        chart = ", chart.png"
    except ValueError:  # nothing changed, so nothing to draw: the lines above say so
        chart = ""
    failed = report.failed or fixed.failed_run or verified.failed or bool(bench_report and bench_report.failed)
    say(f"\nartifacts in {out}: check.txt/json/sarif, fix.diff/json, verify.json/md"
        + (", bench.json/md" if bench_report else "") + f"{chart}; the fixed copy is in repo/")
    return DemoResult(out=out, breaks_before=breaks_before, breaks_after=breaks_after,
                      fixes_applied=len(fixed.applied), verified=not verified.failed, failed=failed)


def leftover_lines(fixed: FixReport) -> list[str]:
    """What the fixes did not do, by site: a break left with its lever, or the rules' declines.

    A break whose site a rule declined shows the declines' reasons, not the lever's advice:
    the decline is the newer knowledge ("would not help" must not be followed by "try it")."""
    declines: dict[tuple[str, int], list[Decline]] = {}
    for d in fixed.declined:
        declines.setdefault((d.file, d.line), []).append(d)
    lines: list[str] = []
    for b in fixed.remaining:
        site = declines.get((b.file, b.line))
        if site:
            lines.append(f"left     {b.file}:{b.line} {b.category.value}, declined:")
            lines += [f"           {rules}: {why}" for why, rules in _by_reason(site)]
            site.clear()  # said once, under the first break there
        elif (b.file, b.line) not in declines:
            lever = f"{b.lever.value}: {b.lever_reason}" if b.lever_reason else b.lever.value
            lines.append(f"left     {b.file}:{b.line} {b.category.value} ({lever})")
        else:
            lines.append(f"left     {b.file}:{b.line} {b.category.value} (declined as above)")
    for site in declines.values():
        lines += [f"declined {d.rule} at {d.file}:{d.line}: {d.reason}" for d in site]
    return lines


def _by_reason(declines: list[Decline]) -> list[tuple[str, str]]:
    """(reason, "GM401, GM501") for each distinct reason, in order: said once for all its rules."""
    rules: dict[str, list[str]] = {}
    for d in declines:
        rules.setdefault(d.reason, []).append(d.rule)
    return [(why, ", ".join(codes)) for why, codes in rules.items()]


def bench_plan(config: Config, fixed: FixReport) -> tuple[Config, list[str], str]:
    """Which target the demo benchmarks, and with which backend.

    The changed target (graphs or breaks; the others run the same code before and after) that
    lost the most graphs, with ``inductor``, the backend a model is deployed with: the story
    shows what a break costs there. One target, because every round of a benchmark is two fresh
    processes that each compile with inductor from an empty cache, and the rounds cannot run in
    parallel without disturbing each other's timings; the other changed targets are named, with
    the command that measures them."""
    changed = [t for t in fixed.targets if not t.error and (t.graphs_before, t.breaks_before) != (t.graphs_after, t.breaks_after)]
    if not changed:
        return config, [], "no target changed: nothing to benchmark"
    best = max(changed, key=lambda t: (t.graphs_before - t.graphs_after, t.breaks_before - t.breaks_after, t.name)).name
    targets = tuple(dataclasses.replace(t, backend="inductor") if t.name == best else t for t in config.targets)
    others = sorted(t.name for t in changed if t.name != best)
    unchanged = sorted(t.name for t in fixed.targets if t.name not in {t.name for t in changed})
    line = f"{best} (inductor: it lost the most graphs)"
    if others:
        line += f"; also changed, not measured here: {', '.join(others)} (`graphmend bench --target NAME`)"
    if unchanged:
        line += f"; unchanged by the fixes: {', '.join(unchanged)}"
    return dataclasses.replace(config, targets=targets), [best], line


def verify_plan(checked: CheckReport, fixed: FixReport) -> tuple[list[str], str]:
    """The targets whose run went through a file the fixes changed (Dynamo traced it): the
    others run the same code before and after, so verifying them would prove nothing new."""
    files = {c.file for c in fixed.changes}
    names = [t.name for t in checked.targets if set(t.traced_files) & files]
    others = [t.name for t in checked.targets if t.name not in names]
    return names, (f"(only the targets that run a changed file are verified; {', '.join(others)} run none)"
                   if names and others else "")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def overall_line(fixed: FixReport, verified: VerifyReport, bench_report: Optional[BenchReport]) -> str:
    """The demo's last word: breaks and graphs over every target, and what the benchmark decided."""
    ok = [t for t in fixed.targets if not t.error]
    parts = [f"breaks {sum(t.breaks_before for t in ok)} -> {sum(t.breaks_after for t in ok)}",
             f"graphs {sum(t.graphs_before for t in ok)} -> {sum(t.graphs_after for t in ok)}",
             _verified_words(ok, verified)]
    points = [t.points[0] for t in (bench_report.targets if bench_report else ()) if t.points]
    for label, ratio, verdict in (("cold start", "cold_start_ratio", "cold_start_verdict"), ("steady state", "steady_ratio", "steady_verdict")):
        if points:
            verdicts = [getattr(p, verdict) for p in points]
            counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("faster", "slower", "no-change") if verdicts.count(v))
            parts.append(f"{label} {_geomean([getattr(p, ratio) for p in points]):.2f}× geometric mean ({counts})")
    return "overall: " + "; ".join(parts)


def _verified_words(ok: list, verified: VerifyReport) -> str:
    if verified.failed:
        return "verification FAILED"
    ran = len(verified.targets)
    if 0 < ran < len(ok):
        return f"every target the fixes reach equivalent ({ran} of {len(ok)})"
    return "every target equivalent"


def load_examples_config() -> Config:
    return load_config(EXAMPLES)
