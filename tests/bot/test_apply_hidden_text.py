"""A fix whose text holds characters a reader cannot see (Trojan Source: bidirectional
overrides and isolates, zero-width characters) is never offered nor committed.

review.json comes from the job that ran the pull request's code, so its fixes' text is the
pull request's to choose. A maintainer reads a suggestion or a patch as GitHub renders it: an
``U+202E`` reorders what follows on the line, a ``U+2066`` isolate hides code in what reads as
a comment, a zero-width space makes two names that read the same differ. ``/graphmend apply``
commits only what the review showed, and what such a line shows is not what it says."""

from __future__ import annotations

import json

import pytest

from bot.render import hidden_characters
from tests.bot import test_apply as A
from tests.bot.conftest import FP_BRANCH, REPO_NAME, git, write_review
from tests.github_server import apply_ops

pull = A.pull  # the fixture: the pull request of test_apply (two fixable breaks)

# Reads as `h = torch.where(...)` followed by a comment; Python sees the comment end at the
# isolate and `; h = h * 0` run after it (the classic "commenting-out" of Trojan Source, inverted).
TROJAN = "        h = torch.where(h.sum() > 0, h * 2, h - 1)  # \u202e\u2066 ok\u2069\u2066; h = h * 0\u2069\n"


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\u200f", "\ufeff", "\u2028", "\x1b", "\U000e0041"])
def test_each_kind_of_hidden_character_is_found(char):
    assert hidden_characters(f"x = 1  # a{char}b\n")
    assert not hidden_characters("x = 'héllo wörld ✓ 你好'\tfoo\r\n\x0c")


def test_a_fix_with_hidden_characters_is_neither_suggested_nor_committed(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    data = json.loads(A.review_for(pull, tmp_path).read_text())
    fix = next(f for f in data["findings"] if f["fingerprint"] == FP_BRANCH)["fix"]
    fix["edits"][0]["new_text"] = TROJAN
    review = write_review(tmp_path, data, "trojan.json")
    A.post(monkeypatch, capsys, server, review, pull.head)
    suggested = "\n".join(c.body for c in server.state.review_comments if "```suggestion" in c.body)
    assert "\u2066" not in suggested  # no one-click suggestion carries it either
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = A.apply(monkeypatch, capsys, server, tmp_path, review, comment)
    # The other fix (GM301's) is committed; this one is not, and the review says why.
    assert code == 0 and result["outcome"] == "committed", result
    text = git(pull.root, "show", "feature:src/model.py")
    assert "h * 0" not in text and not hidden_characters(text) and "torch._assert_async" in text
    said = "\n".join([r.body for r in server.state.reviews] + [c.body for c in server.state.review_comments])
    assert r"No suggestion: its fix writes a character no reader of the review can see \(U\+202E\)" in said


def test_a_path_cannot_read_as_another_file_s_name():
    from bot.render import code_span, escape

    # "src/\u202eyp.ledom" reads as "src/model.py" where the override is honoured
    for shown in (code_span("src/\u202eyp.ledom:3"), code_span("a|\u2066b", in_table=True), escape("x\u200by")):
        assert not hidden_characters(shown), ascii(shown)
    assert code_span("src/\u202eyp.ledom") == "`src/\ufffdyp.ledom`"
