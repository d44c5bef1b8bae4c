"""`# graphmend: ignore[...]` on the line of a dynamic break keeps it out of the gate, as it keeps
a static candidate out of every report; a comment for another rule does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmend.pr import analyse
from tests.bot.conftest import commit_all
from tests.bot.test_pr import HEAD, repo_with_target


def _pr(tmp_path: Path, comment: str) -> tuple[Path, str, str]:
    root, base = repo_with_target(tmp_path)
    head_text = HEAD.replace("model = torch.compile(Model())\n", "").replace("        if h.sum() > 0:\n", f"        if h.sum() > 0:  {comment}\n")
    assert comment in head_text
    (root / "src" / "model.py").write_text(head_text)
    return root, base, commit_all(root, "head: a branch on a tensor, with a comment")


@pytest.fixture(scope="module")
def base_cache(tmp_path_factory) -> Path:
    # Both tests' base commits are byte-identical (fixed dates): the base runs once per worker.
    return tmp_path_factory.mktemp("base-cache")


def test_a_suppressed_dynamic_break_does_not_fail_the_gate(tmp_path, base_cache):
    root, base, head = _pr(tmp_path, "# graphmend: ignore[GM101]")
    result = analyse(root, base, head, cache_dir=base_cache, propose_fixes=False)
    [t] = result.review.targets
    assert not t.head.error
    assert [f for f in result.review.findings if f.status == "introduced"] == []
    assert result.verdict.passed and t.head.break_count == 0


def test_a_comment_for_another_rule_does_not_silence_it(tmp_path, base_cache):
    root, base, head = _pr(tmp_path, "# graphmend: ignore[GM2]")
    result = analyse(root, base, head, cache_dir=base_cache, propose_fixes=False)
    introduced = [f for f in result.review.findings if f.status == "introduced"]
    assert any(f.line == 11 and f.rule == "GM101" for f in introduced)
    assert not result.verdict.passed
