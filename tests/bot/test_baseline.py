"""``graphmend baseline`` round trips: accepted breaks stop failing the gate, a new one still
fails it; the file is sorted and byte-stable, keeps where each break was accepted, drops fixed
breaks, and keeps what a crashed target could not see. Static detection only (no targets): fast."""

from __future__ import annotations

import json
from pathlib import Path

from bot.gate import baseline_fingerprints
from graphmend import baseline
from graphmend.cli import main
from graphmend.model import CheckReport, GraphBreak, TargetResult, Category, to_dict
from graphmend.pr import analyse
from tests.bot.conftest import commit_all, git

MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("activations", h.shape)
        return h


model = torch.compile(Model())
'''

OTHER = '''import torch


@torch.compile
def scale(x):
    if (x > 0).any():
        x = x.clamp(max=1.0)
    return x
'''

NEW_BREAK = MODEL.replace('        return h\n', '        if h.sum() > 0:\n            h = h * 2\n        return h\n')


def make_repo(tmp_path: Path, fail_on: str = "any-break") -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text(MODEL)
    (root / "src" / "other.py").write_text(OTHER)
    (root / "graphmend.yml").write_text(f"paths: [src/]\ngate:\n  fail_on: {fail_on}\n")
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "existing code")
    return root


def run_baseline(root: Path, *args: str, capsys=None) -> tuple[int, dict]:
    code = main(["baseline", "-C", str(root), "--format", "json", *args])
    out = json.loads(capsys.readouterr().out) if capsys else {}
    return code, out


def test_accepted_breaks_stop_failing_the_gate_and_a_new_one_still_fails(tmp_path, capsys):
    root = make_repo(tmp_path)
    before = git(root, "rev-parse", "HEAD")
    # Without a baseline the any-break gate fails on the existing breaks.
    git(root, "checkout", "-q", "-b", "unrelated")
    (root / "README.md").write_text("docs\n")
    commit_all(root, "docs")
    assert analyse(root, before, "HEAD", cache_dir=None, propose_fixes=False).verdict.passed is False

    git(root, "checkout", "-q", "main")
    code, out = run_baseline(root, "--reason", "legacy code, tracked in #12", capsys=capsys)
    assert code == 0 and out["changed"] and out["accepted"] == 2 and len(out["added"]) == 2
    accepted_at = git(root, "rev-parse", "HEAD")
    git(root, "add", "graphmend-baseline.json")
    git(root, "commit", "-q", "-m", "accept today's breaks")
    base = git(root, "rev-parse", "HEAD")

    # A pull request that adds nothing: the accepted breaks no longer fail the gate.
    git(root, "checkout", "-q", "-b", "docs")
    (root / "README.md").write_text("docs\n")
    commit_all(root, "docs")
    ok = analyse(root, base, "HEAD", cache_dir=None, propose_fixes=False)
    assert ok.verdict.passed, ok.verdict.headline
    assert {f.baselined for f in ok.review.findings} == {True}

    # A pull request that adds a break: that one still fails it; the accepted ones do not count.
    git(root, "checkout", "-q", "main")
    git(root, "checkout", "-q", "-b", "feature")
    (root / "src" / "model.py").write_text(NEW_BREAK)
    commit_all(root, "new branch on data")
    bad = analyse(root, base, "HEAD", cache_dir=None, propose_fixes=False)
    assert bad.verdict.passed is False and bad.verdict.new == 1
    [new] = [f for f in bad.review.findings if not f.baselined]
    assert (new.status, new.rule, new.line) == ("introduced", "GM101", 12)

    # The file: what the gate reads, with the reason and where each break was accepted.
    text = (root / "graphmend-baseline.json").read_text()
    data = json.loads(text)
    assert baseline_fingerprints(text) == {e["fingerprint"] for e in data["accepted"]}
    assert {(e["file"], e["line"], e["code"]) for e in data["accepted"]} == {("src/model.py", 11, "GB0059"), ("src/other.py", 6, "GB0170")}
    assert {e["reason"] for e in data["accepted"]} == {"legacy code, tracked in #12"}
    assert {e["accepted_in"] for e in data["accepted"]} == {accepted_at}


def test_the_file_is_sorted_stable_and_keeps_where_breaks_were_accepted(tmp_path, capsys):
    root = make_repo(tmp_path)
    run_baseline(root, "--reason", "first", capsys=capsys)
    path = root / "graphmend-baseline.json"
    first = path.read_text()
    assert first.endswith("}\n") and first == baseline.render(baseline.read(path))
    keys = [(e["file"], e["fingerprint"]) for e in json.loads(first)["accepted"]]
    assert keys == sorted(keys)
    code, out = run_baseline(root, "--reason", "second", capsys=capsys)
    assert code == 0 and out["changed"] is False and path.read_text() == first  # byte-identical re-run

    # An unrelated edit moves a break down two lines: the file does not change.
    commit_all(root, "baseline")
    (root / "src" / "model.py").write_text("# header\n\n" + MODEL)
    _, out = run_baseline(root, "--reason", "third", capsys=capsys)
    assert out["changed"] is False and path.read_text() == first

    # A new break is added with its own reason and commit; a fixed one is dropped.
    (root / "src" / "model.py").write_text(NEW_BREAK.replace('        print("activations", h.shape)\n', ""))
    head = git(root, "rev-parse", "HEAD")
    _, out = run_baseline(root, "--reason", "new one", capsys=capsys)
    assert len(out["added"]) == 1 and len(out["removed"]) == 1 and out["accepted"] == 2
    entries = {e["file"] + ":" + str(e["line"]): e for e in json.loads(path.read_text())["accepted"]}
    assert set(entries) == {"src/model.py:11", "src/other.py:6"}  # the print went; the new branch is at line 11
    assert entries["src/model.py:11"]["reason"] == "new one" and entries["src/model.py:11"]["accepted_in"] == head
    assert entries["src/other.py:6"]["reason"] == "first"  # kept as it was accepted


def test_a_crashed_target_drops_nothing(tmp_path, capsys):
    root = make_repo(tmp_path)
    path = root / "graphmend-baseline.json"
    path.write_text(json.dumps({"version": 1, "fingerprints": ["ab" * 10]}))  # the older bare form
    report = CheckReport(targets=(TargetResult(name="net", error="ImportError: no module named tools"),),
                         static=(GraphBreak(file="src/a.py", line=3, reason="r", category=Category.DATA_DEPENDENT_BRANCH,
                                            fingerprint="cd" * 10),))
    (tmp_path / "check.json").write_text(json.dumps(to_dict(report)))
    code, out = run_baseline(root, "--from-json", str(tmp_path / "check.json"), capsys=capsys)
    assert code == 1
    assert out["held"] == ["ab" * 10] and out["added"] == ["cd" * 10] and out["removed"] == []
    assert baseline_fingerprints(path.read_text()) == {"ab" * 10, "cd" * 10}


def test_a_broken_baseline_file_is_a_one_line_usage_error(tmp_path, capsys):
    root = make_repo(tmp_path)
    (root / "graphmend-baseline.json").write_text("{not json")
    assert main(["baseline", "-C", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "graphmend-baseline.json: not JSON" in err
    (root / "graphmend-baseline.json").write_text(json.dumps({"accepted": [{"fingerprint": "<script>"}]}))
    assert main(["baseline", "-C", str(root)]) == 2
    assert "accepted[0]" in capsys.readouterr().err
