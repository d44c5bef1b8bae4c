"""How each verified fix reaches the repository: one-click suggestions wherever GitHub allows
them, else ``/graphmend apply`` or a patch.

A GitHub suggestion replaces the RIGHT-side lines ``start_line..line`` of one diff hunk with
its text, and a maintainer commits a batch of them with one click. So:

- every edit is widened to whole RIGHT-side lines of the head file: a replacement is already
  whole lines; an insertion before line ``k`` becomes a replacement of line ``k - 1`` (that
  line, then the inserted lines) or of line ``k`` (the inserted lines, then that line),
  whichever lies in a hunk;
- the edits of all offered fixes that overlap once widened (one import line two fixes share,
  two insertions at one point) become one block, so that no two suggestions touch one line
  and a batch can apply them all; a block's text is its head lines with its edits applied, so
  applying every block gives exactly the tree ``graphmend fix`` writes;
- a fix whose blocks lie in two hunks is two suggestions, a set to apply together;
- a fix with an edit no hunk can carry, or a file to create, goes by ``/graphmend apply`` when
  the bot may push to the pull request's branch, else as a patch; each says why.

It reads the head's files (``head_text``: GitHub's contents at the head SHA, never
review.json's word); without them only edits whose ``old_text`` spells out every line they
need can be suggestions. Nothing here imports torch or libcst.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from bot.diff import PullDiff
from bot.review import Edit, FileChange, Finding, FixProposal
from graphmend.sources import split_lines

SUGGESTION, APPLY, PATCH = "suggestion", "apply", "patch"


class EditError(ValueError):
    """Edits do not apply to the text they were made for; ``str()`` is one line."""


@dataclass(frozen=True)
class Block:
    """One suggestion: RIGHT-side lines ``start..end`` of ``file`` become ``text``."""

    file: str
    start: int
    end: int
    text: str
    owners: tuple[str, ...]  # fingerprints of the fixes whose edits it carries, first one posts it


@dataclass(frozen=True)
class Delivery:
    kind: str  # suggestion | apply | patch
    blocks: tuple[Block, ...] = ()  # the fix's suggestions (kind suggestion), in file order
    why: str = ""  # why not (only) suggestions
    files: tuple[FileChange, ...] = ()  # files it needs created or replaced (never a suggestion)
    committable: bool = True  # ``/graphmend apply`` can push to the branch (else: a patch)


# ---------------------------------------------------------------------------------------------
# Whole-line edits


def apply_line_edits(text: str, edits: Sequence[Edit]) -> str:
    """``edits`` (whole lines, in ORIGINAL line numbers, non-overlapping) applied to ``text``.

    The rule of ``graphmend.transforms.engine.apply_edits``, which this must match exactly (the
    tests compare the trees): identical edits once, an ``old_text`` that is not what the lines
    hold is refused, bottom to top, at one point the replacement before the insertions and the
    insertions in their given order, a missing final newline kept missing. Kept here because
    the posting and applying jobs do not load the engine (libcst)."""
    lines = split_lines(text)
    final_newline = not lines or lines[-1].endswith(("\n", "\r"))
    if not final_newline:
        lines[-1] += "\n"
    unique: list[Edit] = []
    for e in edits:
        if e not in unique:
            unique.append(e)
    for e in unique:
        if e.start_line < 1 or e.end_line > len(lines) or e.end_line < e.start_line - 1:
            raise EditError(f"{e.file}: the edit of lines {e.start_line}-{e.end_line} is outside the file")
        if e.old_text and "".join(lines[e.start_line - 1 : e.end_line]) != e.old_text:
            raise EditError(f"{e.file}: lines {e.start_line}-{e.end_line} are not what the fix was made for")
    order = sorted(range(len(unique)), key=lambda i: (unique[i].start_line, unique[i].end_line >= unique[i].start_line, i),
                   reverse=True)
    for i in order:
        e = unique[i]
        lines[e.start_line - 1 : e.end_line] = split_lines(e.new_text)
    out = "".join(lines)
    return out[:-1] if not final_newline and out.endswith("\n") else out


def fixes_digest(fixes: Iterable[tuple[str, FixProposal]]) -> str:
    """A digest of fixes' edits and files, by fingerprint: the review records the one it
    offered, and ``/graphmend apply`` refuses fixes that are not those."""
    data = sorted(
        [fp, [[e.file, e.start_line, e.end_line, e.new_text, e.old_text] for e in fx.edits],
         [[f.path, f.status, f.new_text] for f in fx.files]]
        for fp, fx in fixes
    )
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:32]


# ---------------------------------------------------------------------------------------------
# Planning


LineSource = Callable[[str], Optional[list[str]]]  # path -> the head's lines, None when unknown


def _widen(e: Edit, lines: list[str], diff: PullDiff) -> Optional[tuple[int, int]]:
    """The RIGHT-side whole-line range a suggestion for ``e`` replaces, or None when no hunk has it."""
    fdiff = diff.file(e.file)
    if fdiff is None:
        return None
    if e.end_line >= e.start_line:
        candidates = [(e.start_line, e.end_line)]
    else:  # an insertion before line k: carried by line k - 1 (kept first) or line k (kept last)
        k = e.start_line
        candidates = [(n, n) for n in (k - 1, k) if 1 <= n <= len(lines)]
    for start, end in candidates:
        if end <= len(lines) and fdiff.range_in_one_hunk(start, end):
            return start, end
    return None


def _known_lines(path: str, edits: Iterable[Edit]) -> list[Optional[str]]:
    """Without the head's file: the lines the edits' ``old_text`` spells out (others unknown)."""
    known: dict[int, str] = {}
    for e in edits:
        if e.file == path and e.end_line >= e.start_line and e.old_text:
            for i, line in enumerate(split_lines(e.old_text)):
                known[e.start_line + i] = line
    size = max(known, default=0)
    return [known.get(n) for n in range(1, size + 1)]


def _outside(fix: FixProposal, lines_of: Callable[[str], list], diff: PullDiff) -> str:
    """Why some edit of ``fix`` cannot be a suggestion ("" when every one can)."""
    for e in fix.edits:
        if diff.file(e.file) is None:
            return f"it edits {e.file}, which this pull request does not change"
        if _widen(e, lines_of(e.file), diff) is None:
            where = f"line {e.start_line}" if e.end_line <= e.start_line else f"lines {e.start_line}-{e.end_line}"
            what = "inserts before" if e.end_line < e.start_line else "changes"
            return (f"it {what} {where} of {e.file}, outside this pull request's diff "
                    "(a suggestion can only change lines of the diff)")
    return ""


def plan_deliveries(
    fixes: Sequence[tuple[Finding, FixProposal]],
    diff: PullDiff,
    head_lines: Optional[LineSource] = None,
    *,
    suggestions: bool = True,
    committable: bool = True,
) -> dict[str, Delivery]:
    """How each offered fix (``fixes``: verified, allowed, in review order) is delivered, by
    fingerprint. ``committable``: the bot may push to the pull request's branch."""
    cache: dict[str, list] = {}

    def lines_of(path: str) -> list:
        if path not in cache:
            got = head_lines(path) if head_lines else None
            cache[path] = got if got is not None else _known_lines(path, (e for _, fx in fixes for e in fx.edits))
        return cache[path]

    fallback = APPLY if committable else PATCH
    out: dict[str, Delivery] = {}
    candidates: list[tuple[str, FixProposal]] = []
    for finding, fix in fixes:
        why = "suggestions are turned off (review.suggestions)" if not suggestions else _outside(fix, lines_of, diff)
        if why:
            out[finding.fingerprint] = Delivery(fallback, why=why, files=fix.files, committable=committable)
        else:
            candidates.append((finding.fingerprint, fix))

    # Every candidate edit by file, widened; then spans that overlap are merged, whoever owns
    # them (an edit several fixes share is one span), so that no two suggestions touch a line.
    spans: dict[str, list[tuple[int, int, Edit, str]]] = {}
    for fp, fix in candidates:
        for e in fix.edits:
            start, end = _widen(e, lines_of(e.file), diff)  # type: ignore[misc]
            spans.setdefault(e.file, []).append((start, end, e, fp))
    blocks_of: dict[str, list[Block]] = {fp: [] for fp, _ in candidates}
    broken: dict[str, str] = {}
    for path in sorted(spans):
        items = sorted(spans[path], key=lambda s: (s[0], s[1]))
        groups: list[list[tuple[int, int, Edit, str]]] = []
        for item in items:
            if groups and item[0] <= max(s[1] for s in groups[-1]):
                groups[-1].append(item)
            else:
                groups.append([item])
        lines = lines_of(path)
        for group in groups:
            start, end = group[0][0], max(s[1] for s in group)
            owners = tuple(dict.fromkeys(fp for _, _, _, fp in group))
            head = lines[start - 1 : end]
            try:
                if any(line is None for line in head):
                    raise EditError(f"{path}: lines {start}-{end} could not be read at the head")
                edits = [Edit(e.file, e.start_line - start + 1, e.end_line - start + 1, e.new_text, e.old_text)
                         for _, _, e, _ in sorted(group, key=lambda s: owners.index(s[3]))]
                text = apply_line_edits("".join(head), edits)
            except EditError as exc:
                for fp in owners:
                    broken[fp] = str(exc)
                continue
            block = Block(path, start, end, text, owners)
            for fp in owners:
                blocks_of[fp].append(block)
    for fp, fix in candidates:
        if fp in broken:
            out[fp] = Delivery(fallback, why=f"its edits do not apply as suggestions ({broken[fp]})", files=fix.files,
                               committable=committable)
        else:
            out[fp] = Delivery(SUGGESTION, tuple(blocks_of[fp]), files=fix.files, committable=committable)
    return out


def all_blocks(deliveries: dict[str, Delivery]) -> list[Block]:
    """Every distinct suggestion block, in file order."""
    seen: dict[tuple[str, int, int], Block] = {}
    for d in deliveries.values():
        for b in d.blocks:
            seen.setdefault((b.file, b.start, b.end), b)
    return [seen[k] for k in sorted(seen)]


def files_needed(fixes: Iterable[FixProposal]) -> tuple[FileChange, ...]:
    """The files the fixes need, each once (by path; the first fix's content)."""
    seen: dict[str, FileChange] = {}
    for fx in fixes:
        for f in fx.files:
            seen.setdefault(f.path, f)
    return tuple(seen[p] for p in sorted(seen))
