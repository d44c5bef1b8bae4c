"""``/graphmend apply`` never commits fixes whose edits overlap unless one suggestion shows them
together.

A patch shows one fix, and a suggestion the fixes it carries; committing two fixes whose edits
touch the same lines writes a third text that neither shows. review.json is the analysis job's
word, so its fixes can be made to overlap: here GM101's patch replaces lines 11-14 and GM301's
suggestion rewrites line 12 as two lines; applied together (bottom to top) line 14 of the head
outlived GM101's patch, which shows it removed."""

from __future__ import annotations

import json

from tests.bot import test_apply as A
from tests.bot.conftest import FP_GUARD, REPO_NAME, git, write_review
from tests.github_server import apply_ops

pull = A.pull  # the fixture: the pull request of test_apply (two fixable breaks)


def test_fixes_whose_edits_overlap_outside_one_suggestion_are_not_committed(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    data = json.loads(A.with_edit_outside_the_diff(pull, tmp_path, "\n").read_text())  # GM101: a patch
    guard = next(f for f in data["findings"] if f["fingerprint"] == FP_GUARD)["fix"]
    guard["edits"] = [{"file": "src/model.py", "start_line": 12, "end_line": 12, "old_text": "            h = h * 2\n",
                       "new_text": "            h = h * 2\n            h = h.clamp(max=1e6)\n"}]
    review = write_review(tmp_path, data, "overlap.json")
    A.post(monkeypatch, capsys, server, review, pull.head)
    [rv] = server.reviews_of(1)
    assert "@@ -11,4 +10,1 @@" in rv.body and A.suggestion_comment(server, 12)  # the premise: a patch and a suggestion
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = A.apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused", (result, git(pull.root, "show", "feature:src/model.py"))
    assert "overlap" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def _edit(start: int, end: int, text: str = "x\n"):
    from bot.review import Edit

    return Edit("src/model.py", start, end, text)


def test_which_edits_overlap():
    from bot.apply import overlap

    assert overlap([_edit(11, 14), _edit(12, 12)]) == "lines 11-14 and lines 12-12"
    assert overlap([_edit(11, 14), _edit(13, 12)]) == "lines 11-14 and an insertion at line 13"  # inside the range
    assert overlap([_edit(11, 14), _edit(11, 14, "y\n")])
    assert overlap([_edit(1, 2), _edit(5, 9), _edit(7, 7)])
    # adjacent, identical (applied once) or insertions at one point (each lands whole): no overlap
    assert not overlap([_edit(11, 14), _edit(11, 10), _edit(15, 14), _edit(15, 16)])
    assert not overlap([_edit(11, 14), _edit(11, 14)])
    assert not overlap([_edit(3, 2, "a\n"), _edit(3, 2, "b\n")])
