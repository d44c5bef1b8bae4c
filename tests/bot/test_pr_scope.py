"""`graphmend pr` as a hostile pull request would try it: the scope that decides the gate is the
base branch's, whatever the pull request's own `graphmend.yml` says, and a planted link that
leaves the tree is that file's error, not the end of the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from graphmend.cli import main
from graphmend.pr import analyse
from tests.bot.conftest import commit_all, git
from tests.bot.test_pr import BASE, HEAD


def _repo(tmp_path: Path, config: str | None) -> tuple[Path, str]:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text(BASE)
    if config is not None:
        (root / "graphmend.yml").write_text(config)
    git(root, "init", "-q", "-b", "main")
    return root, commit_all(root, "base")


def test_a_pr_cannot_narrow_its_own_analysis(tmp_path):
    root, base = _repo(tmp_path, "paths: [src/]\ngate:\n  fail_on: new-breaks\n")
    (root / "src" / "model.py").write_text(HEAD)
    (root / "graphmend.yml").write_text('paths: [src/]\nexclude: ["src/**"]\ntargets: []\n')
    head = commit_all(root, "head: a break in src/, and src/ excluded")

    result = analyse(root, base, head, cache_dir=None, propose_fixes=False)

    assert not result.verdict.passed
    assert result.verdict.new >= 1
    assert all(f.file == "src/model.py" for f in result.review.findings if f.status == "introduced")
    config = next(s for s in result.review.stages if s.name == "config")
    assert "changes GraphMend's configuration" in config.reason and "exclude" in config.reason
    assert "base branch's" in config.reason


def test_without_a_base_config_the_default_scope_decides(tmp_path):
    root, base = _repo(tmp_path, None)
    (root / "src" / "model.py").write_text(HEAD)
    (root / "graphmend.yml").write_text('exclude: ["**"]\ngate:\n  fail_on: never\n')
    head = commit_all(root, "head")

    result = analyse(root, base, head, cache_dir=None, propose_fixes=False)

    assert not result.verdict.passed and result.verdict.new >= 1
    assert result.review.settings.fail_on == "new-breaks"


def test_a_link_out_of_the_tree_is_that_files_error_and_the_review_is_written(tmp_path, capsys):
    root, base = _repo(tmp_path, "paths: [src/]\n")
    (root / "src" / "model.py").write_text(HEAD)
    os.symlink("/etc/passwd", root / "src" / "secrets.py")
    os.symlink("../../../../etc/hostname", root / "src" / "up.py")
    head = commit_all(root, "head with links")
    out = tmp_path / "review.json"

    code = main(["pr", "-C", str(root), "--base", base, "--head", head, "-o", str(out), "--no-cache", "--no-fix"])

    assert code == 1  # the new break still fails the gate
    data = json.loads(out.read_text())
    errors = {e["path"]: e["message"] for e in data["errors"]}
    assert "leaves the tree" in errors["src/secrets.py"]
    assert "leaves the tree" in errors["src/up.py"]
    assert any(f["status"] == "introduced" for f in data["findings"])


def test_a_run_config_file_outside_the_repository_changes_only_the_sandbox(tmp_path):
    root, base = _repo(tmp_path, "paths: [src/]\n")
    (root / "src" / "model.py").write_text(HEAD)
    head = commit_all(root, "head")
    run_file = tmp_path / "graphmend-action.yml"  # as the action writes it from its inputs
    run_file.write_text('paths: [src/]\nexclude: ["src/**"]\ngate:\n  fail_on: never\nsandbox:\n  timeout_s: 77\n')
    seen = []

    def spy(config, **kwargs):
        from graphmend.check import check

        seen.append(config)
        return check(config, **kwargs)

    result = analyse(root, base, head, config_name=str(run_file), cache_dir=None, propose_fixes=False, check_fn=spy)
    assert not result.verdict.passed and result.review.settings.fail_on == "new-breaks"
    assert all(c.exclude == () and c.sandbox.timeout_s == 77 for c in seen)
