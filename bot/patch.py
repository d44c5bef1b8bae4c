"""A fix as the unified diff the review body shows, written and read back.

The review body shows a fix that cannot be (only) suggestions as a patch: per file ``--- a/F``
and ``+++ b/F``, then per edit one hunk ``@@ -a,b +c,d @@`` with the lines it removes (``-``,
from the edit's ``old_text``) and the lines it writes (``+``). ``/graphmend apply`` reads such a
patch back (``parse_patch``) and commits a fix only when what the review shows is exactly the
fix (``exact_changes``): the same files, ranges, removed and written lines, in the same order.

Lines are Python's (``graphmend.sources.split_lines``); a line is shown without its line
ending, so a text is shown exactly only when it is whole lines (empty, or ending in one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from bot.review import FixProposal
from graphmend.sources import line_text, split_lines


@dataclass(frozen=True)
class Change:
    """One hunk: lines ``start..end`` of ``file`` (``end = start - 1``: an insertion before
    ``start``) are ``removed`` and ``added`` is written in their place."""

    file: str
    start: int
    end: int
    removed: tuple[str, ...]
    added: tuple[str, ...]


def shown_lines(text: str) -> tuple[str, ...]:
    """``text``'s lines as a patch shows them (without line endings)."""
    return tuple(line_text(line) for line in split_lines(text))


def fix_changes(fix: FixProposal) -> list[Change]:
    """A fix's edits as hunks, in the order its patch shows them: by file, then by first line
    (edits at one line in the fix's order)."""
    by_file: dict[str, list] = {}
    for e in fix.edits:
        by_file.setdefault(e.file, []).append(e)
    return [Change(e.file, e.start_line, e.end_line, shown_lines(e.old_text), shown_lines(e.new_text))
            for file in sorted(by_file) for e in sorted(by_file[file], key=lambda e: e.start_line)]


def exact_changes(fix: FixProposal) -> Union[list[Change], str]:
    """``fix_changes(fix)`` when its patch shows the fix exactly, else why not (one line)."""
    for e in fix.edits:
        where = f"{e.file}:{e.start_line}-{e.end_line}"
        if e.end_line < e.start_line - 1 or e.start_line < 1:
            return f"its edit of {where} is not a range of lines"
        if e.end_line >= e.start_line and not e.old_text:
            return f"its edit of {where} does not say which lines it removes, so no patch can show them"
        if e.end_line >= e.start_line and len(split_lines(e.old_text)) != e.end_line - e.start_line + 1:
            return f"its edit of {where} names {len(split_lines(e.old_text))} removed line(s) for a range of another length"
        for text in (e.old_text, e.new_text):
            if text and not split_lines(text)[-1].endswith(("\n", "\r")):
                return f"its edit of {where} is not whole lines (no line break at its end)"
    return fix_changes(fix)


def patch_text(changes: Sequence[Change]) -> str:
    """``changes`` as a unified diff (new-side numbers shifted by the earlier hunks of a file)."""
    out: list[str] = []
    file, shift = None, 0
    for c in changes:
        if c.file != file:
            file, shift = c.file, 0
            out += [f"--- a/{c.file}", f"+++ b/{c.file}"]
        old_count = max(0, c.end - c.start + 1)
        old_start = c.start if old_count else c.start - 1
        new_start = c.start + shift if c.added else c.start + shift - 1
        out.append(f"@@ -{old_start},{old_count} +{new_start},{len(c.added)} @@")
        out += ["-" + line for line in c.removed] + ["+" + line for line in c.added]
        shift += len(c.added) - old_count
    return "\n".join(out) + "\n"


def _numbers(header: str) -> Optional[tuple[int, int, int]]:
    """``(old_start, old_count, new_count)`` of ``@@ -a,b +c,d @@`` (``c`` is checked by re-writing)."""
    parts = header.split(" ")
    if len(parts) != 4 or parts[0] != "@@" or parts[3] != "@@" or parts[1][:1] != "-" or parts[2][:1] != "+":
        return None
    (a, _, b), (_c, _, d) = parts[1][1:].partition(","), parts[2][1:].partition(",")
    if not all(n.isdigit() for n in (a, b, _c, d)):
        return None
    return int(a), int(b), int(d)


def parse_patch(text: str) -> Optional[list[Change]]:
    """The hunks of a patch as ``patch_text`` writes it, or None when ``text`` is anything else
    (context lines, counts that do not match their lines, a header ``patch_text`` would not
    write): a patch read back is exact or not read at all."""
    lines = [line_text(line) for line in split_lines(text)]
    changes: list[Change] = []
    file, i = None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- a/") and i + 1 < len(lines) and lines[i + 1] == "+++ b/" + line[6:]:
            file, i = line[6:], i + 2
            continue
        numbers = _numbers(line) if file is not None else None
        if numbers is None:
            return None
        old_start, old_count, new_count = numbers
        start = old_start if old_count else old_start + 1
        removed = lines[i + 1 : i + 1 + old_count]
        added = lines[i + 1 + old_count : i + 1 + old_count + new_count]
        if (len(removed), len(added)) != (old_count, new_count) or not all(r.startswith("-") for r in removed) \
                or not all(a.startswith("+") for a in added):
            return None
        i += 1 + old_count + new_count
        changes.append(Change(file, start, start + old_count - 1, tuple(r[1:] for r in removed), tuple(a[1:] for a in added)))
    if not changes or patch_text(changes) != "".join(line + "\n" for line in lines):
        return None
    return changes
