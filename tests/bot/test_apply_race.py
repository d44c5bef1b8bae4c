"""``/graphmend apply`` commits only fixes a review showed *before* the command was given.

The command says "commit what I read". A pull request's author who sees the comment (or
expects it) pushes a new head; its analysis posts a review of the new head with other fixes,
and the apply job, queued behind it, committed those: every fix was shown in a review of the
current head, just not in one the maintainer could have read when they asked."""

from __future__ import annotations

import json

from tests.bot import test_apply as A
from tests.bot.conftest import FP_BRANCH, REPO_NAME, git, write_review
from tests.github_server import apply_ops

pull = A.pull  # the fixture: the pull request of test_apply (two fixable breaks)


def test_a_review_posted_after_the_command_is_not_what_the_command_approved(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    # The maintainer asks before the review they are answered with exists (here: the review of
    # the head the author pushed meanwhile, which carries a fix nobody had read yet).
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    data = json.loads(A.review_for(pull, tmp_path).read_text())
    fix = next(f for f in data["findings"] if f["fingerprint"] == FP_BRANCH)["fix"]
    fix["edits"][0]["new_text"] = "        h = torch.where(h.sum() > 0, h * 2, h - 1)  # pushed after the command\n"
    review = write_review(tmp_path, data, "later.json")
    A.post(monkeypatch, capsys, server, review, pull.head)
    code, result = A.apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused", result
    assert "after the command" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")


def test_a_review_posted_before_the_command_is_committed(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = A.review_for(pull, tmp_path)
    A.post(monkeypatch, capsys, server, review, pull.head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = A.apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 0 and result["outcome"] == "committed", result
