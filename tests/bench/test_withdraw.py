"""A fix that made a target slower is withdrawn: ``graphmend pr`` shows it as declined with the
target and its ratio, ``graphmend scan`` leaves it out of its pull request. The benchmark itself
is tested in test_parent/test_bench; here its result is injected at ``bench_fixes`` (the
decision is what is tested) while detection, the fix loop and verification run for real."""

from __future__ import annotations

import pytest

import graphmend.bench
from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.bench.withdraw import slower_targets, withdrawals
from graphmend.config import load_config
from graphmend.model import Edit, Fix, Safety
from tests.bot.conftest import commit_all, git

ARM = ArmTiming(cold_start_s=2.0, steady_s=0.002, steady_min_s=0.002, throughput=500.0)


def point(ratio, ci, verdict, batch_size=None):
    return BenchPoint(batch_size=batch_size, before=ARM, after=ARM, cold_start_ratio=1.0, steady_ratio=ratio,
                      throughput_ratio=ratio, steady_ci=ci, steady_verdict=verdict)


SLOWER = point(0.8, (0.74, 0.86), "slower")
# As far below 1 as SLOWER, but the interval crosses 1: a noisy machine, not a slowdown.
NOISY = point(0.8, (0.55, 1.2), "no-change")


def fix(path, line=10, rule="GM101"):
    return Fix(rule, "predicate the branch", Safety.SAFE, (Edit(path, line, line, "x\n", "y\n"),), path, line)


def test_only_the_fixes_that_reach_a_slower_target_are_withdrawn():
    report = BenchReport(base="HEAD", targets=(
        TargetBench("a", (point(1.0, (0.9, 1.1), "no-change", 1), point(0.8, (0.74, 0.86), "slower", 8))),
        TargetBench("b", (NOISY,)),
        TargetBench("c", (point(1.5, (1.3, 1.7), "faster"),)),
        TargetBench("broken", (SLOWER,), error="after: the worker crashed"),
    ))
    assert slower_targets(report) == {"a": "steady state 0.80× [0.74–0.86] slower at batch size 8"}
    fixes = {"fa": fix("pkg/a.py"), "fb": fix("pkg/b.py"), "fab": fix("pkg/b.py", rule="GM301")}
    reads = {"a": {"pkg/a.py", "pkg/common.py"}, "b": {"pkg/b.py"}, "c": {"pkg/a.py", "pkg/b.py"}}
    out = withdrawals(report, fixes, reads)
    assert out == {"fa": "GM101 fix withdrawn: made a slower (a: steady state 0.80× [0.74–0.86] slower at batch size 8, "
                         "3 verified fix(es) applied together)"}
    # a target that kept no record of what it read can be reached by every fix
    assert set(withdrawals(report, fixes, {"a": None})) == {"fa", "fb", "fab"}
    # no-change never withdraws, however low its estimate
    assert withdrawals(BenchReport(base="HEAD", targets=(TargetBench("b", (NOISY,)),)), fixes, {}) == {}


# Two modules, each read by its own target, each gaining a tensor-valued `if` that GM101 fixes.
MODULE = '''import torch


class {name}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
{branch}        return h
'''
BRANCH = "        if h.sum() > 0:\n            h = h * 2\n        else:\n            h = h - 1\n"
# One targets module per model: a target depends on what its factory's module imports.
TARGET = '''import torch

from pkg.{name} import {cls}


def build():
    torch.manual_seed(0)
    return {cls}().eval(), (torch.randn(2, 4),)
'''
CONFIG = '''paths: [pkg/]
targets:
  - {name: a, entry: 'tools.ta:build', device: cpu, backend: eager}
  - {name: b, entry: 'tools.tb:build', device: cpu, backend: eager}
'''


def two_targets(tmp_path, branch):
    root = tmp_path / "repo"
    files = {"pkg/__init__.py": "", "pkg/a.py": MODULE.format(name="A", branch=branch),
             "pkg/b.py": MODULE.format(name="B", branch=branch), "tools/__init__.py": "",
             "tools/ta.py": TARGET.format(name="a", cls="A"), "tools/tb.py": TARGET.format(name="b", cls="B"),
             "graphmend.yml": CONFIG}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    return root, commit_all(root, "base")


def inject(monkeypatch, seen):
    """bench_fixes answers: a slower, b too noisy to decide (its estimate as low as a's)."""
    def bench_fixes(config, fixes, progress=None):
        seen.append(sorted(f.file for f in fixes))
        return BenchReport(base="HEAD", targets=(TargetBench("a", (SLOWER,)), TargetBench("b", (NOISY,))))

    monkeypatch.setattr(graphmend.bench, "bench_fixes", bench_fixes)


@pytest.mark.slow
def test_pr_withdraws_the_fix_that_made_its_target_slower(tmp_path, monkeypatch):
    from graphmend.pr import analyse

    root, base = two_targets(tmp_path, "")
    for name in ("a", "b"):
        (root / f"pkg/{name}.py").write_text(MODULE.format(name=name.upper(), branch=BRANCH))
    head = commit_all(root, "head")
    seen = []
    inject(monkeypatch, seen)
    review = analyse(root, base, head, bench=True, allow_unsandboxed=True).review
    assert seen == [["pkg/a.py", "pkg/b.py"]]  # both fixes verified, benchmarked together
    found = {f.file: f for f in review.findings if f.status == "introduced" and f.rule == "GM101"}
    assert set(found) == {"pkg/a.py", "pkg/b.py"}
    withdrawn = found["pkg/a.py"]
    assert withdrawn.fix is None
    assert withdrawn.decline == ("GM101 fix withdrawn: made a slower (a: steady state 0.80× [0.74–0.86] slower, "
                                 "2 verified fix(es) applied together)")
    kept = found["pkg/b.py"]
    assert kept.fix is not None and kept.fix.verification.status == "passed" and kept.decline is None
    stage = {s.name: s for s in review.stages}["bench"]
    assert stage.ran and stage.reason == "1 of 2 fix(es) withdrawn: they made a target slower"
    bench = {t.name: t.benchmark for t in review.targets}
    assert (bench["a"].speedup, bench["a"].speedup_ci, bench["a"].verdict) == (0.8, (0.74, 0.86), "slower")


@pytest.mark.slow
def test_scan_leaves_a_fix_that_made_its_target_slower_out_of_its_pull_request(tmp_path, monkeypatch):
    from graphmend.scan import scan

    root, _ = two_targets(tmp_path, BRANCH)
    seen = []
    inject(monkeypatch, seen)
    result = scan(load_config(root), bench=True)
    assert seen == [["pkg/a.py", "pkg/b.py"]]
    assert [(f.file, f.rule) for f in result.fixes] == [("pkg/b.py", "GM101")]
    assert [f.path for f in result.files] == ["pkg/b.py"]
    [withheld] = result.withheld
    assert (withheld.file, withheld.rule) == ("pkg/a.py", "GM101")
    assert withheld.reason.startswith("GM101 fix withdrawn: made a slower (a: steady state 0.80× [0.74–0.86] slower")
    # the pull request's benchmark line gives each target's ratio with its interval and verdict
    assert "a: steady state 2.00 ms -> 2.00 ms 0.80× [0.74–0.86] slower" in result.fixes[0].benchmark
    assert "b: steady state 2.00 ms -> 2.00 ms 0.80× [0.55–1.20] no-change" in result.fixes[0].benchmark
    # the break counts were measured with the withdrawn fix applied: not shown as this PR's
    assert result.fixes[0].breaks_after is None
