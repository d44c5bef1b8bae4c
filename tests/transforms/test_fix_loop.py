"""The fix loop's decisions, with the detector replaced by a scripted one (no worker runs):
a round after which a target fails is rolled back and nothing is written; a round that removes
the break is kept and written; the loop stops when nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphmend.detect.dynamic as dynamic
from graphmend.config import load_config
from graphmend.fix import apply_fixes
from graphmend.model import Category, GraphBreak, TargetResult

# `x` is made in the function (tanh) before it is selected: the caller never gets its own tensor
# back, so the select is safe (a returned argument would make it unsafe: see test_effects).
MODEL = "import torch\n\n\ndef f(x):\n    x = torch.tanh(x) * 2\n    if (x > 1).any():\n        x = x.masked_fill(x > 1, 1.0)\n    return x\n"
BREAK = GraphBreak("src/m.py", 6, "Data-dependent branching", Category.DATA_DEPENDENT_BRANCH, rule="GM101",
                   verified=True, target="t")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/m.py").write_text(MODEL)
    (tmp_path / "graphmend.yml").write_text("paths: [src/]\ntargets:\n  - {name: t, entry: 'tools.t:f'}\n")
    return tmp_path


def _script(monkeypatch, results):
    calls = []

    def fake(config, names=None, *, root=None, runner=None, progress=None, **_):
        calls.append(Path(root).joinpath("src/m.py").read_text())
        return (results[min(len(calls), len(results)) - 1],)

    monkeypatch.setattr(dynamic, "detect_targets", fake)
    return calls


def test_round_that_breaks_the_target_is_rolled_back(repo, monkeypatch):
    calls = _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,)),
                                  TargetResult("t", error="RuntimeError: boom")])
    report = apply_fixes(load_config(repo))
    assert len(calls) == 2 and "torch.where" in calls[1]  # the second run saw the rewrite
    assert (repo / "src/m.py").read_text() == MODEL and not report.changes and not report.applied
    assert report.failed and "rolled back: target t failed after the rewrite" in report.failed[0].error
    assert report.exit_code == 1 and report.remaining == (BREAK,)


def test_round_that_removes_the_break_is_written(repo, monkeypatch):
    calls = _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,)),
                                  TargetResult("t", graph_count=1, break_count=0)])
    report = apply_fixes(load_config(repo))
    assert len(calls) == 2  # nothing left to route after the re-detection: the loop stops
    assert "torch.where((x > 1).any(), x.masked_fill(x > 1, 1.0), x)" in (repo / "src/m.py").read_text()
    assert [c.file for c in report.changes] == ["src/m.py"] and report.changes[0].written
    assert report.exit_code == 0 and report.targets[0].breaks_before == 1 and report.targets[0].breaks_after == 0


def test_diff_mode_writes_nothing(repo, monkeypatch):
    _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,)),
                          TargetResult("t", graph_count=1, break_count=0)])
    report = apply_fixes(load_config(repo), write=False)
    assert (repo / "src/m.py").read_text() == MODEL
    assert report.changes and not report.changes[0].written and "+    x = torch.where(" in report.changes[0].diff
