"""reviewdog's diff filter: annotate each finding with where it lies in the pull request.

A finding is not dropped here; it is marked ``in-hunk`` (an inline comment can sit on it),
``in-file`` (the file changed but not that line) or ``outside`` (the file is not in the diff),
and the renderer decides what each place gets. The plan also decides which fixes become
one-click suggestions: only a fix that passed verification, whose safety the configuration
allows, that is one contiguous whole-line range, and whose range lies inside one hunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bot.diff import PullDiff
from bot.gate import is_new
from bot.review import Finding, Review

MAX_INLINE = 30
SAFETY_RANK = {"safe": 0, "unsafe": 1, "display-only": 2}


@dataclass(frozen=True)
class Placement:
    finding: Finding
    where: str  # in-hunk | in-file | outside
    suggest: bool  # the fix becomes a ```suggestion block
    start_line: Optional[int]  # the comment's range on the RIGHT side (None: not inline)
    line: Optional[int]
    note: str  # why there is no suggestion, for the reader ("" when there is one)


@dataclass(frozen=True)
class Plan:
    inline: tuple[Placement, ...]  # at most MAX_INLINE, sorted by (path, line)
    body: tuple[Placement, ...]  # new findings that get no inline comment
    patches: tuple[Placement, ...]  # multi-place fixes, shown as a patch in the review body


def fix_allowed(finding: Finding, review: Review) -> bool:
    """A fix we may offer at all: verified, and at a safety the configuration allows."""
    return not _fix_refusal(finding, review)


def _fix_refusal(finding: Finding, review: Review) -> str:
    fix = finding.fix
    if fix is None:
        return finding.decline or "no rule can rewrite this break"
    allowed = SAFETY_RANK.get(fix.safety, 9) <= SAFETY_RANK.get(review.settings.safety, 0) and fix.safety != "display-only"
    if not allowed:
        return f"the fix is {fix.safety}; the configured safety is {review.settings.safety}"
    if fix.verification is None or fix.verification.status != "passed":
        status = fix.verification.status if fix.verification else "not-run"
        return f"the fix did not pass verification ({status})"
    return ""


def suggestion_block_reason(finding: Finding, review: Review) -> str:
    """Why this finding's fix cannot be a suggestion, or "" when it can (diff aside)."""
    refusal = _fix_refusal(finding, review)
    if refusal:
        return refusal
    if not review.settings.suggestions:
        return "suggestions are turned off (review.suggestions)"
    fix = finding.fix
    assert fix is not None
    if not fix.is_single_range:
        return "the fix touches several places; see the patch in the review body"
    edit = fix.edits[0]
    if edit.file != finding.file:
        return "the fix edits another file; see the patch in the review body"
    if edit.end_line < edit.start_line:
        return "the fix only inserts lines; see the patch in the review body"
    return ""


def plan_review(review: Review, diff: PullDiff, *, max_inline: int = MAX_INLINE) -> Plan:
    inline: list[Placement] = []
    body: list[Placement] = []
    patches: list[Placement] = []
    new = sorted((f for f in review.findings if is_new(f)), key=lambda f: (f.file, f.line, f.rule or "", f.fingerprint))
    for finding in new:
        fdiff = diff.file(finding.file)
        if fdiff is None:
            where = "outside"
        elif fdiff.hunk_of(finding.line) is not None:
            where = "in-hunk"
        else:
            where = "in-file"
        note = suggestion_block_reason(finding, review)
        suggest = False
        start = line = None
        if not note and fdiff is not None:
            edit = finding.fix.edits[0]  # type: ignore[union-attr]
            if fdiff.range_in_one_hunk(edit.start_line, edit.end_line):
                suggest = True
                start, line = edit.start_line, edit.end_line
            else:
                note = "the lines to change are not all inside one hunk of this diff; see the patch in the review body"
        if not suggest and where == "in-hunk":
            start, line = finding.line, finding.line
        placement = Placement(finding, where if not suggest else "in-hunk", suggest, start, line, note)
        if not suggest and fix_allowed(finding, review):
            patches.append(placement)
        if line is not None:
            inline.append(placement)
        else:
            body.append(placement)
    if len(inline) > max_inline:
        body.extend(inline[max_inline:])
        inline = inline[:max_inline]
    return Plan(tuple(inline), tuple(body), tuple(patches))
