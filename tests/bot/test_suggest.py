"""The suggestion planner (bot/suggest.py): edits widened to whole RIGHT-side lines, overlapping
edits of several fixes posted once, a fix across two hunks as a set of two, edits outside the
diff and whole new files delivered by `/graphmend apply` or as a patch, each saying why; and
applying every block as GitHub does gives exactly what the engine's ``apply_edits`` gives."""

from __future__ import annotations

import difflib
import random

from bot import render
from bot.diff import parse_files
from bot.diff_filter import plan_review
from bot.gate import compute_verdict
from bot.review import Edit, from_json
from bot.suggest import APPLY, PATCH, SUGGESTION, all_blocks, apply_line_edits
from graphmend.model import Edit as EngineEdit
from graphmend.transforms.engine import apply_edits
from tests.bot.conftest import finding, pr_review, verification

BASE = [f"line {n}\n" for n in range(1, 31)]
# The pull request changes lines 4-5 and 21-23: two hunks (3 lines of context each).
HEAD = BASE[:3] + ["added 4\n", "added 5\n"] + BASE[5:20] + ["added 21\n", "added 22\n", "added 23\n"] + BASE[23:]
SHA_B, SHA_H = "1" * 40, "2" * 40


def patch() -> str:
    text = "".join(difflib.unified_diff(BASE, HEAD, "a/m.py", "b/m.py", n=3))
    return text[text.index("@@"):]


DIFF = parse_files([("m.py", "modified", patch())])


def head_lines(path: str):
    return list(HEAD) if path == "m.py" else None


def fix(fp: str, line: int, edits: list[dict], files: list[dict] = ()) -> dict:
    return finding(fp, line, "r", file="m.py", rule="GM201", fix={
        "rule": "GM201", "title": f"fix {fp[:2]}", "safety": "safe", "edits": edits, "files": list(files),
        "verification": verification(), "benchmark": None})


def edit(start: int, end: int, new: str) -> dict:
    old = "".join(HEAD[start - 1 : end]) if end >= start else ""
    return {"file": "m.py", "start_line": start, "end_line": end, "new_text": new, "old_text": old}


def review(*findings: dict, suggestions: bool = True):
    data = pr_review(SHA_B, SHA_H, suggestions=suggestions)
    data["findings"] = list(findings)
    return from_json(data)


def github_apply(text: list[str], blocks) -> str:
    lines = list(text)
    for b in sorted(blocks, key=lambda b: -b.start):
        lines[b.start - 1 : b.end] = [b.text]
    return "".join(lines)


def all_edits(rv) -> list[Edit]:
    return [e for f in rv.findings if f.fix for e in f.fix.edits]


def test_an_insertion_is_widened_to_whole_lines_and_gives_the_engine_s_text():
    # an insertion before 5 is carried by line 4, which the fix also changes: one suggestion
    rv = review(fix("a1" * 10, 4, [edit(5, 4, "inserted\n"), edit(4, 4, "changed 4\n"), edit(2, 1, "top\n")]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    blocks = plan.deliveries["a1" * 10].blocks
    assert [(b.start, b.end, b.text) for b in blocks] == [(1, 1, "line 1\ntop\n"), (4, 4, "changed 4\ninserted\n")]
    engine = apply_edits("".join(HEAD), [EngineEdit(**vars(e)) for e in all_edits(rv)])
    assert github_apply(HEAD, blocks) == engine


def test_a_fix_across_two_hunks_is_a_set_of_two_suggestions():
    rv = review(fix("a1" * 10, 4, [edit(4, 4, "new 4\n"), edit(27, 26, "tail\n")]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    d = plan.deliveries["a1" * 10]
    assert d.kind == SUGGESTION and [(b.start, b.end) for b in d.blocks] == [(4, 4), (26, 26)]
    assert [(p.part, p.parts, p.siblings) for p in plan.inline] == [(1, 2, (("m.py", 26),)), (2, 2, (("m.py", 4),))]
    first = render.inline_comment(plan.inline[0])
    assert "**1 of 2**: apply together with the suggestion at `m.py:26`" in first
    assert github_apply(HEAD, d.blocks) == apply_line_edits("".join(HEAD), all_edits(rv))


def test_an_edit_two_fixes_share_is_suggested_once():
    shared = edit(22, 21, "from ._rt import x\n")
    rv = review(fix("a1" * 10, 21, [edit(21, 21, "fixed 21\n"), shared]),
                fix("b2" * 10, 23, [edit(23, 23, "fixed 23\n"), shared]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    blocks = all_blocks(plan.deliveries)
    # the insertion before 22 is carried by line 21, which the first fix changes: one block,
    # posted once, in the first fix's comment; the second fix's own edit is its own block
    assert [(b.start, b.end, b.owners) for b in blocks] == [(21, 21, ("a1" * 10, "b2" * 10)), (23, 23, ("b2" * 10,))]
    posted = [(p.finding.fingerprint, p.line, p.part, p.parts) for p in plan.inline if p.suggest]
    assert posted == [("a1" * 10, 21, 1, 1), ("b2" * 10, 23, 2, 2)]
    assert github_apply(HEAD, blocks) == apply_line_edits("".join(HEAD), all_edits(rv))


def test_edits_outside_the_diff_go_by_apply_or_patch_saying_why():
    rv = review(fix("a1" * 10, 4, [edit(4, 4, "new 4\n"), edit(13, 12, "import rt\n")]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    d = plan.deliveries["a1" * 10]
    assert d.kind == APPLY and "inserts before line 13 of m.py, outside this pull request's diff" in d.why
    body = render.review_body(rv, compute_verdict(rv), plan)
    assert "**Not one-click** (comment `/graphmend apply`" in body and "outside this pull request" in body
    assert plan_review(rv, DIFF, head_lines=head_lines, committable=False).deliveries["a1" * 10].kind == PATCH
    off = review(fix("a1" * 10, 4, [edit(4, 4, "new 4\n")]), suggestions=False)
    assert plan_review(off, DIFF, head_lines=head_lines).deliveries["a1" * 10].why.startswith("suggestions are turned off")


def test_a_new_file_is_listed_with_why_and_the_sticky_says_what_each_fix_adds():
    runtime = {"path": "pkg/_graphmend_runtime.py", "status": "created", "new_text": "x = 1\n" * 180}
    rv = review(fix("a1" * 10, 4, [edit(4, 4, "new 4\n")], [runtime]), fix("b2" * 10, 21, [edit(21, 21, "n\n")], [runtime]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    assert all(d.kind == SUGGESTION for d in plan.deliveries.values())
    body = render.review_body(rv, compute_verdict(rv), plan)
    assert body.count("new file `pkg/_graphmend_runtime.py` (new, 180 lines)") == 1
    assert "a suggestion cannot create or replace a whole file" in body and "+++ b/pkg/_graphmend_runtime.py" in body
    sticky = render.sticky_body(rv, compute_verdict(rv), plan.deliveries)
    assert sticky.count("+1 file: `pkg/_graphmend_runtime.py` (new, 180 lines)") == 2
    assert "one-click suggestion + the file by `/graphmend apply` or the patch" in sticky
    assert "The fix needs +1 file" in render.inline_comment(plan.inline[0])


def test_stale_old_text_is_never_suggested():
    bad = edit(4, 4, "new 4\n")
    bad["old_text"] = "something else\n"
    plan = plan_review(review(fix("a1" * 10, 4, [bad])), DIFF, head_lines=head_lines)
    d = plan.deliveries["a1" * 10]
    assert d.kind == APPLY and "not what the fix was made for" in d.why and not d.blocks


def test_the_bot_s_edit_rule_is_the_engine_s():
    rng = random.Random(15)
    for _ in range(300):
        lines = [f"l{i}\n" for i in range(rng.randint(1, 12))]
        text = "".join(lines) + ("" if rng.random() < 0.8 else "x")
        n = len(text.splitlines())
        edits, used = [], set()
        for _ in range(rng.randint(1, 4)):
            start = rng.randint(1, n + 1)
            end = rng.choice([start - 1, min(n, start + rng.randint(0, 2))])
            span = set(range(start, end + 1))
            if span & used or end > n:
                continue
            used |= span
            edits.append(("f", start, end, "".join(f"n{rng.randint(0, 9)}\n" for _ in range(rng.randint(0, 2)))))
        ours = apply_line_edits(text, [Edit(*e) for e in edits])
        assert ours == apply_edits(text, [EngineEdit(*e) for e in edits]), (text, edits)


def test_a_fix_wholly_inside_another_s_suggestion_names_it():
    shared = edit(22, 21, "from ._rt import x\n")
    rv = review(fix("a1" * 10, 21, [edit(21, 21, "fixed 21\n"), shared]), fix("b2" * 10, 23, [shared]))
    plan = plan_review(rv, DIFF, head_lines=head_lines)
    assert plan.deliveries["b2" * 10].kind == SUGGESTION
    other = next(p for p in plan.inline if p.finding.fingerprint == "b2" * 10)
    assert not other.suggest and other.line == 23
    assert "Suggested fix (fix b2): the suggestion at m.py:21 carries this fix too" in render.inline_comment(other)


def test_a_suggestion_in_another_file_than_its_finding_is_posted_on_that_file():
    from bot.post import Poster, PullTarget

    two = parse_files([("m.py", "modified", patch()), ("n.py", "modified", patch())])
    other = dict(edit(4, 4, "new 4 in n\n"), file="n.py")
    rv = review(fix("a1" * 10, 4, [edit(4, 4, "new 4\n"), other]))
    plan = plan_review(rv, two, head_lines=lambda path: list(HEAD))
    assert plan.deliveries["a1" * 10].kind == SUGGESTION
    poster = Poster(None, PullTarget("octo/models", 1, SHA_H))
    comments = sorted((c["path"], c["line"], "new 4 in n" in c["body"]) for c in map(poster._comment, plan.inline))
    assert comments == [("m.py", 4, False), ("n.py", 4, True)]
