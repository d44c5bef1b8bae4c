"""`graphmend pr` on real git repositories: base/head from flags or the event, matching by
fingerprint, the baseline as it is on the base branch, the base's cache, review.json that
`graphmend post` accepts. These repositories have no targets, so findings are static."""

from __future__ import annotations

import json
from pathlib import Path

from graphmend.check import check
from graphmend.cli import main
from graphmend.config import load_config
from graphmend.pr import analyse
from tests.bot.conftest import commit_all, git

BASE = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("old", h.shape)
        return h


model = torch.compile(Model())
'''

HEAD = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        return h


model = torch.compile(Model())
'''


def make_pr(tmp_path: Path, *, accept_own_breaks: bool = False) -> tuple[Path, str, str]:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text(BASE)
    (root / "graphmend.yml").write_text("paths: [src/]\ngate:\n  fail_on: new-breaks\n")
    (root / "graphmend-baseline.json").write_text(json.dumps({"version": 1, "fingerprints": []}))
    git(root, "init", "-q", "-b", "main")
    base = commit_all(root, "base")
    (root / "src" / "model.py").write_text(HEAD)
    if accept_own_breaks:
        found = check(load_config(root), dynamic=False)
        fps = sorted(b.fingerprint for b in found.static)
        assert fps
        (root / "graphmend-baseline.json").write_text(json.dumps({"version": 1, "fingerprints": fps}))
        # and switch the gate off, loosen the fix safety, stop the sticky comment
        (root / "graphmend.yml").write_text("paths: [src/]\ngate:\n  fail_on: never\nfix:\n  safety: unsafe\n"
                                            "review:\n  comment: never\n")
    return root, base, commit_all(root, "head")


def test_pr_matches_breaks_and_writes_a_review_post_accepts(tmp_path, capsys):
    root, base, head = make_pr(tmp_path)
    out = tmp_path / "review.json"
    code = main(["pr", "-C", str(root), "--base", base, "--head", head, "-o", str(out), "--no-cache",
                 "--summary", str(tmp_path / "s.md"), "--format", "json"])
    assert code == 1
    data = json.loads(out.read_text())
    from bot.review import from_json

    review = from_json(data)  # what post will accept
    assert (review.base_sha, review.head_sha) == (base, head)
    by_status = {(f.status, f.rule, f.line) for f in review.findings}
    assert by_status == {("introduced", "GM101", 11), ("fixed", "GM201", 11)}
    assert all(f.target is None and f.fingerprint for f in review.findings)
    stages = {s.name: s for s in review.stages}
    assert stages["verify"].ran is False or stages["fix"].ran is False  # no targets: nothing can be verified
    assert "New graph breaks" in (tmp_path / "s.md").read_text()


def test_a_pr_cannot_accept_its_own_breaks_by_editing_baseline_or_gate(tmp_path):
    root, base, head = make_pr(tmp_path, accept_own_breaks=True)
    result = analyse(root, base, head, cache_dir=None)
    introduced = [f for f in result.review.findings if f.status == "introduced"]
    assert introduced and not any(f.baselined for f in introduced)
    # the base's policy, not the PR's
    assert (result.review.settings.fail_on, result.review.settings.safety, result.review.settings.comment) == (
        "new-breaks", "safe", "on-change")
    assert result.verdict.passed is False


def test_base_results_are_cached_by_base_sha(tmp_path):
    root, base, head = make_pr(tmp_path)
    calls: list[Path] = []

    def counting_check(config, **kw):
        calls.append(config.root)
        return check(config, **kw)

    first = analyse(root, base, head, cache_dir=tmp_path / "cache", check_fn=counting_check)
    second = analyse(root, base, head, cache_dir=tmp_path / "cache", check_fn=counting_check)
    assert (first.base_from_cache, second.base_from_cache) == (False, True)
    assert len(calls) == 3  # head, base, head
    assert first.review.findings == second.review.findings
    assert len(list((tmp_path / "cache").glob(f"{base}-*.json"))) == 1


def test_base_and_head_come_from_the_event_not_the_merge_commit(tmp_path, capsys, monkeypatch):
    root, base, head = make_pr(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"base": {"sha": base}, "head": {"sha": head}}}))
    monkeypatch.setenv("GITHUB_SHA", "0" * 40)  # the merge commit: must not be used
    out = tmp_path / "r.json"
    assert main(["pr", "-C", str(root), "--event", str(event), "-o", str(out), "--no-cache"]) == 1
    assert json.loads(out.read_text())["head_sha"] == head


def test_unknown_commit_is_a_usage_error(tmp_path, capsys):
    root, base, _ = make_pr(tmp_path)
    assert main(["pr", "-C", str(root), "--base", base, "--head", "f" * 40, "--no-cache", "-o", str(tmp_path / "x.json")]) == 2
    assert "not in the checkout" in capsys.readouterr().err


def test_pr_then_post_keeps_the_gate_red_when_the_pr_edits_the_baseline(tmp_path, server, monkeypatch, capsys):
    root, base, head = make_pr(tmp_path, accept_own_breaks=True)
    out = tmp_path / "review.json"
    assert main(["pr", "-C", str(root), "--base", base, "--head", head, "-o", str(out), "--no-cache"]) == 1
    server.add_repo("octo/repo", str(root))
    server.open_pull("octo/repo", base, head)
    from tests.bot.conftest import TOKEN

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    code = main(["post", str(out), "--repo", "octo/repo", "--pr", "1", "--head-sha", head, "--api-url", server.url,
                 "--summary", str(tmp_path / "s.md")])
    assert code == 1
    [run] = server.state.check_runs
    assert run.conclusion == "failure" and run.head_sha == head
    [comment] = server.comments_of(1)
    assert comment.path == "src/model.py" and comment.line == 11 and "GM101" in comment.body


TARGETS = '''import torch

from src.model import Model


def tiny():
    torch.manual_seed(0)
    return Model().eval(), (torch.randn(2, 4),)
'''

CONFIG_WITH_TARGET = """paths: [src/]
targets:
  - name: tiny
    entry: tools.targets:tiny
    device: cpu
    backend: eager
sandbox:
  timeout_s: 300
"""


def repo_with_target(tmp_path):
    """A repository whose base commit has the model (no compile site) and a target for it:
    (root, base sha)."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "src" / "__init__.py").write_text("")
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "targets.py").write_text(TARGETS)
    (root / "graphmend.yml").write_text(CONFIG_WITH_TARGET)
    (root / "src" / "model.py").write_text(BASE.replace('        print("old", h.shape)\n', "").replace("model = torch.compile(Model())\n", ""))
    git(root, "init", "-q", "-b", "main")
    return root, commit_all(root, "base")


def test_pr_with_one_target_reports_dynamic_breaks(tmp_path):
    root, base = repo_with_target(tmp_path)
    (root / "src" / "model.py").write_text(HEAD.replace("model = torch.compile(Model())\n", ""))
    git(root, "commit", "-q", "-am", "head")
    head = git(root, "rev-parse", "HEAD")

    # Fixes are proposed and verified by their own suites; here: dynamic breaks and matching.
    result = analyse(root, base, head, cache_dir=tmp_path / "cache", propose_fixes=False)
    [t] = result.review.targets
    assert t.name == "tiny" and t.base.break_count == 0 and t.head.break_count >= 1 and not t.head.error
    introduced = [f for f in result.review.findings if f.status == "introduced"]
    assert introduced and all(f.target == "tiny" and f.verified for f in introduced)
    assert any(f.gb_id == "GB0170" and f.line == 11 for f in introduced)
    assert result.verdict.passed is False
    stages = {s.name: s for s in result.review.stages}
    assert stages["fix"].ran is False and "--no-fix" in stages["fix"].reason
    assert all(f.fix is None and "--no-fix" in (f.decline or "") for f in introduced if f.rule)


def test_whole_line_edits_apply_in_original_line_numbers(tmp_path):
    from graphmend.model import Edit
    from graphmend.pr import _stale_edit
    from graphmend.trees import apply_edits_to_tree
    from graphmend.model import Fix, Safety

    (tmp_path / "m.py").write_text("a\nb\nc\nd\n")
    edits = [Edit("m.py", 2, 1, "x\ny\n"), Edit("m.py", 3, 4, "z\n", "c\nd\n")]
    fix = Fix("GM101", "t", Safety.SAFE, tuple(edits), "m.py", 3)
    assert _stale_edit(tmp_path, fix) == ""
    apply_edits_to_tree(tmp_path, edits)
    assert (tmp_path / "m.py").read_text() == "a\nx\ny\nb\nz\n"
    assert "does not match" in _stale_edit(tmp_path, fix)
