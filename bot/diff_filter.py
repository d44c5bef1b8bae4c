"""reviewdog's diff filter: annotate each finding with where it lies in the pull request.

A finding is not dropped here; it is marked ``in-hunk`` (an inline comment can sit on it),
``in-file`` (the file changed but not that line) or ``outside`` (the file is not in the diff),
and the renderer decides what each place gets. The plan also decides how each fix is
delivered (``suggest``): a fix we may offer (verified, at a safety the configuration allows)
whose edits all lie in the diff's hunks is one suggestion per hunk it touches; the others go
by ``/graphmend apply`` or as a patch in the review body, saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bot.diff import PullDiff
from bot.gate import is_new
from bot.review import Finding, FixProposal, Review
from bot.suggest import SUGGESTION, Block, Delivery, LineSource, plan_deliveries

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
    block: Optional[Block] = None  # the suggestion this comment carries
    part: int = 0  # of a fix posted as several suggestions: which one (1-based) ...
    parts: int = 0  # ... of how many
    siblings: tuple[tuple[str, int], ...] = ()  # (path, line) of the set's other suggestions
    delivery: Optional[Delivery] = None


@dataclass(frozen=True)
class Plan:
    inline: tuple[Placement, ...]  # at most MAX_INLINE, sorted by (path, line)
    body: tuple[Placement, ...]  # new findings that get no inline comment
    patches: tuple[Placement, ...]  # fixes that are not (only) suggestions: apply / patch, with why
    deliveries: dict[str, Delivery] = field(default_factory=dict)  # by fingerprint, every offered fix


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


def offered_fixes(review: Review) -> list[tuple[Finding, FixProposal]]:
    """The fixes the review offers, in review order: those of new findings that we may offer."""
    new = sorted((f for f in review.findings if is_new(f)), key=lambda f: (f.file, f.line, f.rule or "", f.fingerprint))
    return [(f, f.fix) for f in new if f.fix is not None and fix_allowed(f, review)]


def plan_review(review: Review, diff: PullDiff, *, max_inline: int = MAX_INLINE,
                head_lines: Optional[LineSource] = None, committable: bool = True) -> Plan:
    """Where each new finding goes and how each offered fix is delivered. ``head_lines`` gives
    the head's files (GitHub's contents); ``committable``: ``/graphmend apply`` can push."""
    inline: list[Placement] = []
    body: list[Placement] = []
    patches: list[Placement] = []
    new = sorted((f for f in review.findings if is_new(f)), key=lambda f: (f.file, f.line, f.rule or "", f.fingerprint))
    deliveries = plan_deliveries(offered_fixes(review), diff, head_lines, suggestions=review.settings.suggestions,
                                 committable=committable)
    for finding in new:
        fdiff = diff.file(finding.file)
        if fdiff is None:
            where = "outside"
        elif fdiff.hunk_of(finding.line) is not None:
            where = "in-hunk"
        else:
            where = "in-file"
        delivery = deliveries.get(finding.fingerprint)
        if delivery is None:
            note = _fix_refusal(finding, review)
        elif delivery.kind == SUGGESTION:
            note = ""
        else:
            note = delivery.why
        placements = []
        if delivery is not None and delivery.kind == SUGGESTION:
            own = [b for b in delivery.blocks if b.owners[0] == finding.fingerprint]
            for i, b in enumerate(delivery.blocks, 1):
                if b not in own:
                    continue
                others = tuple((o.file, o.end) for o in delivery.blocks if o is not b)
                placements.append(Placement(finding, "in-hunk", True, b.start, b.end, "", b, i, len(delivery.blocks),
                                            others, delivery))
            if not own:
                carrier = delivery.blocks[0]
                note = (f"the suggestion at {carrier.file}:{carrier.end} carries this fix too "
                        f"(its edits overlap another fix's)")
        if not placements:
            line = finding.line if where == "in-hunk" else None
            placements.append(Placement(finding, where, False, line, line, note, delivery=delivery))
        if delivery is not None and (delivery.kind != SUGGESTION or delivery.files):
            patches.append(placements[0])
        for p in placements:
            (inline if p.line is not None else body).append(p)
    if len(inline) > max_inline:
        body.extend(inline[max_inline:])
        inline = inline[:max_inline]
    return Plan(tuple(inline), tuple(body), tuple(patches), deliveries)
