"""Every markdown body the bot posts, compared with golden files in tests/bot/golden/.

Regenerate after an intended change with ``GRAPHMEND_UPDATE_GOLDEN=1 pytest tests/bot/test_render.py``
and read the diff: these files are what users see on their pull requests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bot import render
from bot.diff import parse_files
from bot.diff_filter import plan_review
from bot.gate import compute_verdict
from bot.review import from_json
from tests.bot.conftest import finding, pr_review
from tests.bot.test_units import BASE, HEAD, PATCH

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("GRAPHMEND_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path} (run with GRAPHMEND_UPDATE_GOLDEN=1)"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


def scenario():
    data = pr_review(BASE, HEAD)
    data["findings"].append(finding("d4" * 10, 3, "print() in a compiled region", file="src/util.py", rule="GM201",
                                    category="side-effect", target=None, gb_id=None))
    data["findings"].append(finding("e5" * 10, 40, "was here before", status="unchanged", target=None))
    data["findings"].append(finding("f6" * 10, 50, "gone in this PR", status="fixed", target=None))
    data["findings"][0]["fix"]["benchmark"] = {"cold_start_before_s": 2.5, "cold_start_after_s": 0.9, "steady_before_ms": 1.2,
                                               "steady_after_ms": 0.8, "speedup": 1.5, "max_error": 0.0,
                                   "speedup_ci": [1.3, 1.7], "verdict": "faster"}
    review = from_json(data)
    plan = plan_review(review, parse_files([("src/model.py", "modified", PATCH)]))
    return review, compute_verdict(review), plan


def test_golden_review_body():
    review, verdict, plan = scenario()
    check_golden("review_body.md", render.review_body(review, verdict, plan))


@pytest.mark.parametrize("index,name", [(0, "inline_suggestion_branch.md"), (1, "inline_suggestion_guard.md"),
                                        (2, "inline_no_fix.md")])
def test_golden_inline_comments(index, name):
    _, _, plan = scenario()
    check_golden(name, render.inline_comment(plan.inline[index]))


def test_golden_inline_comment_without_a_verified_fix():
    data = pr_review(BASE, HEAD)
    data["findings"][0]["fix"]["verification"] = {"status": "failed", "detail": "outputs differ: max error 0.5",
                                                  "max_error": 0.5, "breaks_before": 3, "breaks_after": 2}
    review = from_json(data)
    plan = plan_review(review, parse_files([("src/model.py", "modified", PATCH)]))
    check_golden("inline_failed_verification.md", render.inline_comment(plan.inline[0]))


def test_golden_sticky_and_summary():
    review, verdict, _ = scenario()
    check_golden("sticky_failing.md", render.sticky_body(review, verdict))
    check_golden("step_summary.md", render.summary_markdown(review, verdict))
    data = pr_review(BASE, HEAD)
    data["findings"] = [finding("f6" * 10, 50, "gone in this PR", status="fixed")]
    data["targets"][0]["head"] = {"break_count": 0, "graph_count": 1, "error": None}
    green = from_json(data)
    check_golden("sticky_passing.md", render.sticky_body(green, compute_verdict(green)))


def test_golden_multi_place_patch():
    data = pr_review(BASE, HEAD)
    data["findings"][0]["fix"]["edits"] = [
        {"file": "src/model.py", "start_line": 1, "end_line": 0, "new_text": "from graphmend_runtime import defer\n", "old_text": ""},
        {"file": "src/model.py", "start_line": 11, "end_line": 14, "new_text": "        h = torch.where(h.sum() > 0, h * 2, h - 1)\n",
         "old_text": "        if h.sum() > 0:\n            h = h * 2\n        else:\n            h = h - 1\n"},
    ]
    review = from_json(data)
    plan = plan_review(review, parse_files([("src/model.py", "modified", PATCH)]))
    check_golden("review_body_patch.md", render.review_body(review, compute_verdict(review), plan))


def test_suggestion_fence_is_longer_than_any_backtick_run():
    code = 'doc = """```python\nx = 1\n````\n"""\n'
    fenced = render.fence(code, "suggestion")
    assert fenced.startswith("`````suggestion\n") and fenced.endswith("\n`````") and code in fenced


def test_escape_neutralises_html_markdown_and_mentions():
    text = render.escape('<b>hi</b> [x](http://e.com) @team **bold** `code` <!-- graphmend:sticky -->\nsecond line')
    assert "<" not in text and ">" not in text and "@" not in text and "\n" not in text
    bare = re.sub(r"&#?\w+;", "", text)  # the entities themselves contain '#'
    assert re.search(r"(?<!\\)[`*\[\]()_|#!]", bare) is None  # every markdown special is backslash-escaped
    assert "<!-- graphmend:sticky" not in text and "http://" not in text


def test_bodies_stay_under_githubs_limit():
    data = pr_review(BASE, HEAD)
    long_reason = "x" * 3000
    data["findings"] = [finding(f"{i:020x}", i + 1, long_reason, file=f"src/f{i % 50}.py") for i in range(3000)]
    big_edit = {"file": "src/model.py", "start_line": 11, "end_line": 14, "new_text": "y = 1\n" * 20000, "old_text": "x\n" * 4}
    data["findings"][0]["fix"] = {"rule": "GM101", "title": "t", "safety": "safe", "edits": [big_edit, big_edit],
                                  "verification": {"status": "passed"}, "benchmark": None}
    data["findings"][0]["file"] = "src/model.py"
    data["findings"][0]["line"] = 11
    data["errors"] = [{"path": f"src/e{i}.py", "message": "y" * 1900} for i in range(500)]
    data["targets"] = [{"name": f"t{i:03d}-" + "n" * 90, "base": {"break_count": i, "graph_count": 1, "error": "e" * 1999},
                        "head": None, "benchmark": None} for i in range(200)]
    review = from_json(data)
    verdict = compute_verdict(review)
    plan = plan_review(review, parse_files([("src/model.py", "modified", PATCH)]))
    assert len(render.review_body(review, verdict, plan)) < 65536
    assert len(render.sticky_body(review, verdict)) < 65536 and "more target(s)" in render.sticky_body(review, verdict)
    assert len(render.check_summary(review, verdict)) < 65535
    assert len(render.summary_markdown(review, verdict)) < 65536 * 2
    single = dict(data["findings"][0]["fix"], edits=[big_edit])
    data["findings"][0]["fix"] = single
    review = from_json(data)
    plan = plan_review(review, parse_files([("src/model.py", "modified", PATCH)]))
    comment = render.inline_comment(plan.inline[0])
    assert len(comment) < 65536 and "too long" in comment


def test_rendering_is_deterministic():
    review, verdict, plan = scenario()
    assert render.review_body(review, verdict, plan) == render.review_body(*scenario())
    assert re.search(r"\d{4}-\d\d-\d\d", render.sticky_body(review, verdict)) is None


def test_golden_workflow_commands_and_check_summary():
    review, verdict, _ = scenario()
    check_golden("workflow_commands.txt", "\n".join(render.workflow_commands(review, verdict)) + "\n")
    check_golden("check_summary.md", render.check_summary(review, verdict))
    data = pr_review(BASE, HEAD)
    data["findings"][0]["reason"] = "a, b: 100%\nnext line"
    data["findings"][0]["file"] = "src/we,ird:name.py"
    [first] = [ln for ln in render.workflow_commands(from_json(data), compute_verdict(from_json(data))) if "we%2C" in ln]
    assert first.startswith("::error file=src/we%2Cird%3Aname.py,line=11,") and first.endswith("::a, b: 100%25 next line (fixable: predicate the branch with torch.where)")


@pytest.mark.parametrize("verdict,ci,faster", [("faster", [1.3, 1.7], 1), ("no-change", [0.8, 2.6], 0), (None, None, 0)])
def test_speed_is_claimed_only_on_a_faster_verdict(verdict, ci, faster):
    # The same 1.50× estimate: only bench's "faster" verdict (interval above 1, change above the
    # minimum) earns the ⚡; an interval that crosses 1, or no verdict at all, shows the number
    # with its interval and claims nothing.
    data = pr_review(BASE, HEAD)
    data["targets"][0]["benchmark"].update(speedup_ci=ci, verdict=verdict)
    review = from_json(data)
    verdict_ = compute_verdict(review)
    body = render.sticky_body(review, verdict_)
    assert f"⚡ {faster} faster" in body
    row = "| steady state speedup | 1.50×" + (f" [{ci[0]:.2f}–{ci[1]:.2f}] {verdict}" if ci else "") + " |"
    assert row in body
