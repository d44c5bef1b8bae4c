"""The fix loop's decisions, with the detector and verify replaced by scripted ones (no worker
runs): a round after which a target fails, or has more breaks or more graphs, is rolled back and
nothing is written; a round that removes the break is kept and written; a fix verify finds
wrong is withdrawn and not written; the loop stops when nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphmend.detect.dynamic as dynamic
import graphmend.verify.parent as verify_parent
from graphmend.config import load_config
from graphmend.fix import apply_fixes
from graphmend.model import Category, GraphBreak, TargetResult, to_dict
from graphmend.schemas import validate
from graphmend.verify.results import FixVerdict, VerifyReport

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


@pytest.fixture(autouse=True)
def verified(monkeypatch):
    """verify_edits, scripted: ``wrong`` holds the rules whose fixes it finds wrong; ``calls``
    the base tree's text and the fixes of each call."""
    state = {"wrong": set(), "calls": []}

    def fake(config, base_root, fixes, names=None, **_):
        state["calls"].append(((Path(base_root) / "src/m.py").read_text(), [f.rule for f in fixes]))
        verdicts = tuple(FixVerdict(f.fingerprint, f.rule, f.file, f.line, ok=f.rule not in state["wrong"], alone=True,
                                    reason="" if f.rule not in state["wrong"] else "t: input differs (eager) on example: "
                                    "argument args[0] is written by the original, not by the rewrite") for f in fixes)
        return VerifyReport(base="working tree", fixes=verdicts)

    monkeypatch.setattr(verify_parent, "verify_edits", fake)
    return state


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
    assert report.changes and not report.changes[0].written and "+        x = torch.where(" in report.changes[0].diff


def test_round_with_fewer_breaks_but_more_graphs_is_rolled_back(repo, monkeypatch, verified):
    # The demo's tiny-moe: breaks 3 -> 2 while graphs went 5 -> 6.
    _script(monkeypatch, [TargetResult("t", graph_count=5, break_count=3, breaks=(BREAK,)),
                          TargetResult("t", graph_count=6, break_count=2)])
    report = apply_fixes(load_config(repo))
    validate("fix", to_dict(report))
    assert (repo / "src/m.py").read_text() == MODEL and not report.applied and not report.changes
    assert report.rolled_back == ("round 1: target t has more graphs after the rewrite (5 -> 6, breaks 3 -> 2)",)
    assert "rolled back: target t has more graphs" in report.failed[0].error
    assert not verified["calls"]  # a rolled-back round is not worth verifying
    assert report.targets[0].graphs_after == 5 and report.targets[0].breaks_after == 3
    from graphmend.commands.fix import render_text

    assert "round 1 rolled back (the target would be worse): target t has more graphs" in render_text(report, diff=False)


def test_fix_verify_finds_wrong_is_withdrawn_and_not_written(repo, monkeypatch, verified):
    verified["wrong"].add("GM101")
    calls = _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,)),
                                  TargetResult("t", graph_count=1, break_count=0)])
    report = apply_fixes(load_config(repo))
    validate("fix", to_dict(report))
    # verify ran against the tree before the round, with the round's fix
    assert verified["calls"] == [(MODEL, ["GM101"])]
    assert (repo / "src/m.py").read_text() == MODEL and not report.applied and not report.changes
    (w,) = report.withdrawn
    assert (w.rule, w.file, w.line) == ("GM101", "src/m.py", 6)
    assert w.error.startswith("withdrawn: verify: t: input differs") and "args[0]" in w.error
    assert len(calls) == 2  # not proposed again in a later round
    assert report.remaining == (BREAK,) and report.exit_code == 1
    from graphmend.commands.fix import render_text

    text = render_text(report, diff=False)
    assert "src/m.py:6: GM101 withdrawn: verify: t: input differs" in text and "1 withdrawn by verify" in text


def test_no_verify_skips_verify(repo, monkeypatch, verified):
    verified["wrong"].add("GM101")
    _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,)),
                          TargetResult("t", graph_count=1, break_count=0)])
    report = apply_fixes(load_config(repo), verify=False)
    assert not verified["calls"] and report.applied and not report.withdrawn


ALIAS = '''\
import torch


def step(x):
    if (x > 1).any():
        x = x.clamp(max=1.0)
    torch.add(x, 1, out=x)
    return x
'''

ALIAS_TARGETS = '''\
import torch

from pkg.alias import step


def target(dtype=torch.float32, device="cpu"):
    return step, (torch.full((4,), 0.5, dtype=dtype),)


def cases(dtype=torch.float32, device="cpu"):
    return [((torch.full((4,), 2.0, dtype=dtype),), {})]
'''


def test_real_loop_never_writes_a_rewrite_that_stops_writing_the_argument(make_repo, monkeypatch, verified):
    """Real detection, real verify: predicating the branch would make ``x`` a new tensor on both
    paths, so ``torch.add(x, 1, out=x)`` no longer writes the caller's tensor when the branch is not taken.
    The rule may decline it; if it does not, verify must withdraw it: never written."""
    monkeypatch.undo()  # the real verify_edits
    root = make_repo({"pkg/__init__.py": "", "pkg/alias.py": ALIAS, "tools/__init__.py": "", "tools/t.py": ALIAS_TARGETS,
                      "graphmend.yml": "paths: [pkg/]\ntargets:\n  - {name: t, entry: 'tools.t:target', device: cpu, "
                                       "backend: eager, inputs: 'tools.t:cases'}\n"})
    report = apply_fixes(load_config(root), unsafe=True)
    validate("fix", to_dict(report))
    assert (root / "pkg/alias.py").read_text() == ALIAS and not report.applied
    reasons = [d.reason for d in report.declined] + [w.error for w in report.withdrawn]
    assert reasons, report
    if report.withdrawn:
        assert "argument args[0] is written by the original, not by the rewrite" in report.withdrawn[0].error


def test_one_target_made_worse_takes_back_only_the_fixes_in_the_files_it_traced(tmp_path, monkeypatch, verified):
    """Two targets, two files: the fix in u.py gives target u more graphs, the fix in m.py helps
    target a. Only u.py's fix is taken back (and not proposed again); m.py's is kept and written."""
    (tmp_path / "src").mkdir()
    for name in ("m", "u"):
        (tmp_path / f"src/{name}.py").write_text(MODEL)
    (tmp_path / "graphmend.yml").write_text(
        "paths: [src/]\ntargets:\n  - {name: a, entry: 'tools.t:f'}\n  - {name: u, entry: 'tools.t:g'}\n")
    site = {n: GraphBreak(f"src/{n}.py", 6, "Data-dependent branching", Category.DATA_DEPENDENT_BRANCH, rule="GM101",
                          verified=True, target=n) for n in ("m", "u")}
    seen = []

    def fake(config, names=None, *, root=None, runner=None, progress=None, **_):
        fixed = {n: "torch.where" in Path(root, f"src/{n}.py").read_text() for n in ("m", "u")}
        seen.append(fixed)
        a = (TargetResult("a", graph_count=1, break_count=0, traced_files=("src/m.py",)) if fixed["m"] else
             TargetResult("a", graph_count=2, break_count=1, breaks=(site["m"],), traced_files=("src/m.py",)))
        u = (TargetResult("u", graph_count=6, break_count=0, traced_files=("src/u.py",)) if fixed["u"] else
             TargetResult("u", graph_count=5, break_count=1, breaks=(site["u"],), traced_files=("src/u.py",)))
        return (a, u)

    monkeypatch.setattr(dynamic, "detect_targets", fake)
    report = apply_fixes(load_config(tmp_path))
    validate("fix", to_dict(report))
    assert {"m": True, "u": True} in seen and seen[-1] == {"m": True, "u": False}
    assert "torch.where" in (tmp_path / "src/m.py").read_text()
    assert (tmp_path / "src/u.py").read_text() == MODEL
    assert [(f.file, f.rule) for f in report.applied] == [("src/m.py", "GM101")]
    assert [w.file for w in report.withdrawn] == ["src/u.py"] and "more graphs" in report.withdrawn[0].error
    assert len(report.rolled_back) == 1 and "taken back (1 kept)" in report.rolled_back[0]
    assert [(t.name, t.graphs_after) for t in report.targets] == [("a", 1), ("u", 5)]
    from graphmend.commands.fix import render_text

    assert "round 1 partly rolled back (the target would be worse): target u has more graphs" in render_text(report, diff=False)


def test_round_with_more_recompilations_is_rolled_back(repo, monkeypatch, verified):
    """Fewer breaks and no more graphs, but Dynamo now compiles a frame again for each value a
    Python number used to take: not an improvement either."""
    _script(monkeypatch, [TargetResult("t", graph_count=2, break_count=1, breaks=(BREAK,), recompiles=0),
                          TargetResult("t", graph_count=1, break_count=0, recompiles=3)])
    report = apply_fixes(load_config(repo))
    validate("fix", to_dict(report))
    assert (repo / "src/m.py").read_text() == MODEL and not report.applied and not report.changes
    assert report.rolled_back == ("round 1: target t recompiles more after the rewrite (0 -> 3 recompilations, graphs 2 -> 1)",)
    assert "rolled back: target t recompiles more" in report.failed[0].error
    assert (report.targets[0].recompiles_before, report.targets[0].recompiles_after) == (0, 0)
    from graphmend.commands.fix import render_text

    assert "round 1 rolled back (the target would be worse): target t recompiles more" in render_text(report, diff=False)
