"""Reading back what a review shows (``bot.patch``, ``render.fenced``, ``bot.shown``): a patch or
a suggestion is read exactly as the bot writes it, or not at all."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.github_client import ReviewCommentInfo
from bot.patch import Change, exact_changes, fix_changes, parse_patch, patch_text
from bot.render import fence, fenced, fix_patch
from bot.review import Edit, FixProposal
from bot.shown import read_review, why_not_shown
from bot.suggest import SUGGESTION, Block, Delivery

# Line texts with the characters that trip str.splitlines (form feed, \x1c-\x1e, U+0085,
# U+2028/9, a vertical tab), diff markers and backticks, but no \r or \n.
LINE = st.text(st.sampled_from(list("ab -+@`\t\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")), max_size=8)


@st.composite
def changes(draw):
    out = []
    for file in sorted(draw(st.sets(st.sampled_from(["a.py", "pkg/b.py", "c d.py"]), min_size=1, max_size=2))):
        line = 1
        for _ in range(draw(st.integers(1, 3))):
            start = line + draw(st.integers(0, 5))
            removed = tuple(draw(st.lists(LINE, max_size=3)))
            added = tuple(draw(st.lists(LINE, max_size=3)))
            out.append(Change(file, start, start + len(removed) - 1, removed, added))
            line = start + len(removed) + (0 if removed else 1)
    return out


@settings(max_examples=200, deadline=None)
@given(changes())
def test_a_patch_reads_back_as_the_changes_it_was_written_from(cs):
    assert parse_patch(patch_text(cs)) == cs


@settings(max_examples=200, deadline=None)
@given(st.lists(LINE, max_size=4), st.sampled_from(["suggestion", "diff"]))
def test_a_fence_reads_back_as_its_code(lines, info):
    code = "".join(line + "\n" for line in lines)
    body = "Suggested fix:\n\n" + fence(code, info) + "\n\n" + fence("```" + info + "\nx\n", "python") + "\n"
    assert fenced(body, info) == [code]


HUNK = "--- a/m.py\n+++ b/m.py\n@@ -3,1 +3,2 @@\n-x = 1\n+x = 2\n+y = 3\n"


def test_anything_but_the_bot_s_own_patch_form_is_not_read():
    assert parse_patch(HUNK) == [Change("m.py", 3, 3, ("x = 1",), ("x = 2", "y = 3"))]
    assert parse_patch(HUNK.replace("+3,2", "+4,2")) is None  # a new-side start no shift explains
    assert parse_patch(HUNK.replace("@@ -3,1", "@@ -3,2")) is None  # counts that do not match the lines
    assert parse_patch(HUNK + " context\n") is None  # context lines are never written
    assert parse_patch(HUNK.replace("-x = 1\n", "")) is None  # a removed line left out
    assert parse_patch("") is None


def test_an_unclosed_fence_is_not_read():
    assert fenced("```suggestion\nx = 1\n", "suggestion") == []
    assert fenced("````suggestion\nx = 1\n```\n````\n", "suggestion") == ["x = 1\n```\n"]


EDIT = Edit("m.py", 3, 3, "x = 2\ny = 3\n", "x = 1\n")
FIX = FixProposal(rule="GM101", title="t", safety="safe", edits=(EDIT,))
OTHER = Edit("m.py", 9, 8, "z = 0\n", "")


def comment(body: str, line: int, start_line=None, side="RIGHT") -> ReviewCommentInfo:
    return ReviewCommentInfo(1, body, "m.py", line, "0" * 40, None, 7, start_line, side)


def test_a_fix_s_patch_is_shown_only_alone_and_whole():
    assert why_not_shown(FIX, None, read_review(fence(fix_patch(FIX), "diff"), [])) == ""
    # the same hunk inside another fix's patch is not this fix's patch
    both = FixProposal(rule="GM101", title="t", safety="safe", edits=(EDIT, OTHER))
    assert why_not_shown(FIX, None, read_review(fence(fix_patch(both), "diff"), [])) == "its patch is not in the review body"
    cut = "…and 1 more patch(es); run `graphmend fix` locally"
    assert "left patches out" in why_not_shown(FIX, None, read_review(cut, []))


def test_an_edit_a_patch_cannot_show_exactly_is_never_shown():
    no_old = FixProposal(rule="GM101", title="t", safety="safe", edits=(Edit("m.py", 3, 3, "", ""),))
    assert "does not say which lines it removes" in exact_changes(no_old)
    joined = FixProposal(rule="GM101", title="t", safety="safe", edits=(Edit("m.py", 3, 3, "x = 2", "x = 1\n"),))
    assert "not whole lines" in exact_changes(joined)
    # The renderer still writes something for them; reading it back never matches the fix.
    assert why_not_shown(no_old, None, read_review(fence(fix_patch(no_old), "diff"), [])) != ""
    assert why_not_shown(joined, None, read_review(fence(fix_patch(joined), "diff"), [])) != ""
    assert fix_changes(joined) == [Change("m.py", 3, 3, ("x = 1",), ("x = 2",))]


def test_a_suggestion_is_shown_on_its_exact_lines_with_its_exact_text_once():
    block = Block("m.py", 2, 3, "w = 0\nx = 2\ny = 3\n", ("ab",))
    delivery = Delivery(SUGGESTION, (block,))
    body = "<!-- graphmend:finding ab -->\nSuggested fix:\n\n" + fence(block.text, "suggestion") + "\n"
    assert why_not_shown(FIX, delivery, read_review("", [comment(body, 3, 2)])) == ""
    assert "is not in the review" in why_not_shown(FIX, delivery, read_review("", [comment(body, 4, 3)]))
    assert "is not in the review" in why_not_shown(FIX, delivery, read_review("", [comment(body, 3, 2, side="LEFT")]))
    assert "is not in the review" in why_not_shown(FIX, delivery, read_review("", [comment(body, None, None)]))
    edited = body.replace("y = 3\n", "y = 3\nz = 4\n")
    assert "edited after it was posted" in why_not_shown(FIX, delivery, read_review("", [comment(edited, 3, 2)]))
    twice = body + "\n" + fence("w = 0\n", "suggestion") + "\n"
    assert "ambiguous" in why_not_shown(FIX, delivery, read_review("", [comment(twice, 3, 2)]))


def test_a_crlf_suggestion_stored_with_lf_line_endings_is_still_the_same_lines():
    block = Block("m.py", 2, 3, "w = 0\r\nx = 2\r\n", ("ab",))
    shown = read_review("", [comment("Suggested fix:\n\n" + fence("w = 0\nx = 2\n", "suggestion") + "\n", 3, 2)])
    assert why_not_shown(FIX, Delivery(SUGGESTION, (block,)), shown) == ""
    joined = read_review("", [comment(fence("w = 0 x = 2\n", "suggestion"), 3, 2)])
    assert why_not_shown(FIX, Delivery(SUGGESTION, (block,)), joined) != ""
