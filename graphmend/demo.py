"""The demo: GraphMend's whole pipeline on the bundled ``examples/`` repository.

check → fix → verify → bench, on a COPY of the examples (a fresh git repository in the output
folder), so the bundled files never change. Every stage writes its artifacts (JSON, markdown, a
PNG chart, the diff) into the output folder and prints a short readable summary; progress goes
to stderr. Nothing here needs a network or a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from graphmend import fsutil
from graphmend.config import Config, load_config
from graphmend.model import to_dict

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
    from graphmend.bench import bench as run_bench
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
    for d in fixed.declined:
        say(f"        declined {d.rule} at {d.file}:{d.line}: {d.reason}")
    for b in fixed.remaining:
        lever = f"{b.lever.value}: {b.lever_reason}" if b.lever_reason else b.lever.value
        say(f"        left     {b.file}:{b.line} {b.category.value} ({lever})")

    # 3. verify: the fixed working tree against the commit it started from.
    started = stage("verify: original vs fixed, same weights, same inputs, eager and compiled")
    verified = verify(config, base="HEAD", progress=note)
    _write(out, "verify.json", json.dumps(to_dict(verified), indent=2, sort_keys=True))
    _write(out, "verify.md", render_verify_markdown(verified))
    say(render_verify_text(verified).rstrip() + f"  [{time.monotonic() - started:.0f} s]")

    # 4. bench: what the fixes buy, as before/after ratios measured in one run.
    bench_report = None
    if bench:
        started = stage("bench: fresh processes per arm, interleaved; cold start and steady state")
        quick = config.replace_section("bench", warmup=2, repeat=10)
        bench_report = run_bench(quick, base="HEAD", progress=note)
        _write(out, "bench.json", json.dumps(to_dict(bench_report), indent=2, sort_keys=True))
        _write(out, "bench.md", render_bench_markdown(bench_report))
        say(render_bench_text(bench_report).rstrip() + f"  [{time.monotonic() - started:.0f} s]")

    write_chart(out / "chart.png", verified, bench_report)
    failed = report.failed or fixed.failed_run or verified.failed or bool(bench_report and bench_report.failed)
    say(f"\nartifacts in {out}: check.txt/json/sarif, fix.diff/json, verify.json/md"
        + (", bench.json/md" if bench else "") + ", chart.png; the fixed copy is in repo/")
    return DemoResult(out=out, breaks_before=breaks_before, breaks_after=breaks_after,
                      fixes_applied=len(fixed.applied), verified=not verified.failed, failed=failed)


def load_examples_config() -> Config:
    return load_config(EXAMPLES)
