"""What the bot's review of a head shows of each fix, read back from GitHub.

``/graphmend apply`` commits a fix only when the review a maintainer read showed that fix in
full, because review.json comes from the job that ran the pull request's code: a fix is
committed on the strength of what the review shows, never of the artifact's word. A fix is
shown when

- each suggestion it is delivered as (``bot.suggest``: file, RIGHT-side lines, text) stands in
  exactly one ```` ```suggestion ```` block of a live inline comment of that review, on exactly
  those lines, with exactly those lines of text (line endings aside: GitHub may store a body's
  CRLF as LF, and no reader sees them); or
- its patch (``bot.patch``: every hunk, the lines it removes and writes, the hunk headers)
  stands whole in one ```` ```diff ```` block of the review's body.

Anything else is not shown: a suggestion that is missing, on other lines, edited after it was
posted, or one of several on the same lines; a patch cut by the review's size limit (``…and N
more patch(es)``), one that shows other hunks too (another fix's), one that cannot show the
lines an edit removes. A whole file a fix needs is not read from the review: the only one
committed is GraphMend's own runtime module, checked against this GraphMend's copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from bot.github_client import ReviewCommentInfo
from bot.patch import Change, exact_changes, parse_patch, shown_lines
from bot.render import fenced
from bot.review import FixProposal
from bot.suggest import SUGGESTION, Block, Delivery

CUT = "more patch(es)"  # the body's note when its patches were cut (render._not_suggestions)


@dataclass(frozen=True)
class Shown:
    suggestions: dict[tuple[str, int, int], tuple[str, ...]]  # (path, first, last line) -> suggestion texts there
    patches: tuple[tuple[Change, ...], ...]  # every diff block of the body that reads back as a patch
    cut: bool  # the body says some patches were left out


def read_review(body: str, comments: Iterable[ReviewCommentInfo]) -> Shown:
    """What ``body`` (the review's) and ``comments`` (the inline comments posted with it) show."""
    suggestions: dict[tuple[str, int, int], tuple[str, ...]] = {}
    for c in comments:
        if c.line is None or c.side != "RIGHT" or c.start_side not in (None, "RIGHT"):
            continue  # outdated (its lines left the diff), or on the base's side: it suggests nothing for the head
        key = (c.path, c.start_line or c.line, c.line)
        suggestions[key] = suggestions.get(key, ()) + tuple(fenced(c.body, "suggestion"))
    patches = []
    for block in fenced(body, "diff"):
        changes = parse_patch(block)
        if changes is not None:
            patches.append(tuple(changes))
    return Shown(suggestions, tuple(patches), CUT in body)


def _lines(b: Block) -> str:
    return f"{b.file}:{b.start}" if b.start == b.end else f"{b.file}:{b.start}-{b.end}"


def _suggestion_missing(blocks: Iterable[Block], shown: Shown) -> str:
    for b in blocks:
        texts = shown.suggestions.get((b.file, b.start, b.end), ())
        if not texts:
            return f"its suggestion for {_lines(b)} is not in the review for this head"
        if len(texts) > 1:
            return f"{_lines(b)} carries {len(texts)} suggestions in the review, so which one was meant is ambiguous"
        if shown_lines(texts[0]) != shown_lines(b.text):
            return f"the suggestion on {_lines(b)} is not what the fix writes there (edited after it was posted?)"
    return ""


def why_not_shown(fix: FixProposal, delivery: Optional[Delivery], shown: Shown) -> str:
    """"" when the review shows ``fix`` exactly (its suggestions or its patch); else why not."""
    changes = exact_changes(fix)
    if not isinstance(changes, str) and tuple(changes) in shown.patches:
        return ""
    if delivery is not None and delivery.kind == SUGGESTION and delivery.blocks:
        return _suggestion_missing(delivery.blocks, shown)
    if isinstance(changes, str):
        return changes
    if shown.cut:
        return "its patch is not in the review body, which left patches out at GitHub's size limit"
    return "its patch is not in the review body"
