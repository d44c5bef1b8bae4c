"""Running rules on one file and applying their fixes: the pure middle of ``graphmend fix``.

``fix_text(path, text, ctx, rules, lines_by_rule)`` parses the text once, runs each rule
(dynamic mode: only on the break lines routed to it; static mode: every candidate site),
then decides which fixes to apply and applies them, returning a :class:`FileResult` value.
Nothing here reads or writes files, imports torch, or raises on bad input.

Decisions, in order, each leaving a reason on a :class:`Skipped` value:

1. safety: a fix whose safety is not allowed by ``ctx.threshold`` (``fix.safety`` /
   ``--unsafe-fixes``) is not applied ("unsafe fix: apply with --unsafe-fixes");
   ``display-only`` fixes are never applied.
2. overlap: fixes are taken in a deterministic order — earlier line first, then rule code,
   then fingerprint — and a fix whose edits overlap an already accepted fix's edits is
   skipped as a whole (its edits are atomic). Edits *identical* to an accepted one (two
   fixes that both add ``import torch`` at the top) are merged, not counted as overlap.
3. apply: all accepted edits refer to the ORIGINAL line numbers and are applied together
   from bottom to top; each edit's ``old_text`` is checked first, so a stale edit can never
   land on the wrong lines.

Idempotence (fixing the result again changes nothing) is a property every rule must have;
the generic rule test checks it on every example, and ``fix_text(rounds=N)`` relies on it to
re-run rules until the text stops changing (fixes skipped for overlap get another chance).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from graphmend.model import Category, Decline, Edit, Fix, GraphBreak, Safety
from graphmend.sources import split_lines
from graphmend.transforms.base import (
    Failure,
    RuleContext,
    SourceError,
    SourceFile,
    Suppressed,
    Transform,
)


@dataclass(frozen=True)
class Skipped:
    """A fix a rule proposed that was not applied, and why."""

    fix: Fix
    reason: str


@dataclass(frozen=True)
class FileResult:
    """Everything that happened to one file. ``text`` is the content after the applied fixes."""

    path: str
    original: str
    text: str
    applied: tuple[Fix, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    declined: tuple[Decline, ...] = ()
    failed: tuple[Failure, ...] = ()
    suppressed: tuple[Suppressed, ...] = ()
    error: Optional[str] = None  # the file could not be parsed; it is left untouched

    @property
    def changed(self) -> bool:
        return self.text != self.original


class EditConflict(Exception):
    """An edit's ``old_text`` does not match the text it should replace."""


# ------------------------------------------------------------------------------------------
# Routing dynamic breaks to rules


def route_breaks(breaks: Iterable[GraphBreak], rules: Sequence[Transform]) -> dict[str, set[int]]:
    """Which break lines of one file each rule should look at (dynamic mode).

    A break goes to a rule when the break names that rule (``GraphBreak.rule``) or a rule whose
    breaks it shares (``shares``: GM102 looks at GM101's), or, when it names none, when the
    break's category is one the rule handles.
    """
    routed: dict[str, set[int]] = {r.code: set() for r in rules}
    for b in breaks:
        for r in rules:
            if (b.rule == r.code or (b.rule is not None and b.rule in getattr(r, "shares", ()))
                    or (b.rule is None and _category(b.category) in r.categories)):
                routed[r.code].add(b.line)
    return routed


def _category(value: object) -> object:
    try:
        return Category(value)
    except ValueError:
        return value


# ------------------------------------------------------------------------------------------
# Choosing and applying fixes


def _overlaps(a: Edit, b: Edit) -> bool:
    """Whether two whole-line edits of the same file touch the same text.

    A pure insertion (``end_line == start_line - 1``) sits *between* lines: it conflicts with
    a replacement only when it falls strictly inside the replaced range.
    """
    a_ins, b_ins = a.end_line < a.start_line, b.end_line < b.start_line
    if a_ins and b_ins:
        return False  # two insertions at the same point are both applied, in order
    if a_ins:
        return b.start_line < a.start_line <= b.end_line
    if b_ins:
        return a.start_line < b.start_line <= a.end_line
    return a.start_line <= b.end_line and b.start_line <= a.end_line


def fix_order(fix: Fix) -> tuple:
    return (fix.line, fix.rule, fix.fingerprint, fix.title)


def choose_fixes(fixes: Iterable[Fix], threshold: Safety) -> tuple[list[Fix], list[Skipped]]:
    """The fixes to apply together, deterministically, and the others with reasons."""
    accepted: list[Fix] = []
    accepted_edits: list[Edit] = []
    skipped: list[Skipped] = []
    for fix in sorted(fixes, key=fix_order):
        if fix.safety is Safety.DISPLAY_ONLY:
            skipped.append(Skipped(fix, "display-only: shown, never applied"))
            continue
        if not fix.safety.allowed_by(threshold):
            skipped.append(Skipped(fix, f"{fix.safety.value} fix: apply with --unsafe-fixes"))
            continue
        if not fix.edits:
            skipped.append(Skipped(fix, "the fix has no edits"))
            continue
        new_edits = [e for e in fix.edits if e not in accepted_edits]
        clash = next(((e, o) for e in new_edits for o in accepted_edits if _overlaps(e, o)), None)
        if clash is not None:
            owner = next(f for f in accepted if clash[1] in f.edits)
            skipped.append(Skipped(fix, f"overlaps the {owner.rule} fix at line {owner.line}; run fix again to apply it"))
            continue
        accepted.append(fix)
        accepted_edits.extend(new_edits)
    return accepted, skipped


def _once_per_definition(edits: Iterable[Edit]) -> list[Edit]:
    """Insertions that add the same top-level definition (a module-level helper that several fixes
    need, each with a different set of others) add it once: the first keeps it."""
    known: set[str] = set()
    out: list[Edit] = []
    for e in edits:
        if e.end_line != e.start_line - 1 or e.old_text:
            out.append(e)
            continue
        chunks: list[str] = []  # a top-level definition with the blank lines after it
        for line in e.new_text.splitlines(keepends=True):
            if not chunks or line.startswith(("def ", "class ")):
                chunks.append(line)
            else:
                chunks[-1] += line
        definitions = [c for c in chunks if c.startswith(("def ", "class "))]
        kept = [c for c in chunks if c not in definitions or c.strip() not in known]
        known.update(c.strip() for c in definitions)
        if not definitions or any(c in definitions for c in kept):
            out.append(dataclasses.replace(e, new_text="".join(kept)))
    return out


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping whole-line edits given in ORIGINAL line numbers.

    Identical edits are applied once. Insertions at the same point keep their given order.
    Raises EditConflict when an edit's ``old_text`` is not what the lines hold.
    """
    lines = split_lines(text)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"  # edits are whole lines; a missing final newline is restored below
        had_final_newline = False
    else:
        had_final_newline = True
    unique: list[Edit] = []
    for e in _once_per_definition(edits):
        if e not in unique:
            unique.append(e)
    for e in unique:
        if e.start_line < 1 or e.end_line > len(lines) or e.end_line < e.start_line - 1:
            raise EditConflict(f"{e.file}: edit of lines {e.start_line}-{e.end_line} is outside the file")
        current = "".join(lines[e.start_line - 1 : e.end_line])
        if e.old_text and current != e.old_text:
            raise EditConflict(f"{e.file}: lines {e.start_line}-{e.end_line} changed since the fix was computed")
    # Bottom to top so earlier line numbers stay valid; at one point, a replacement
    # (later start) is applied before insertions, and insertions in reverse given order
    # so that they end up in the given order.
    order = sorted(range(len(unique)), key=lambda i: (unique[i].start_line, unique[i].end_line >= unique[i].start_line, i), reverse=True)
    for i in order:
        e = unique[i]
        lines[e.start_line - 1 : e.end_line] = split_lines(e.new_text)
    out = "".join(lines)
    if not had_final_newline and out.endswith("\n"):
        out = out[:-1]
    return out


def apply_fix_list(text: str, fixes: Iterable[Fix]) -> str:
    """Apply already-chosen fixes (e.g. a report's fixes) to ``text``."""
    return apply_edits(text, [e for f in sorted(fixes, key=fix_order) for e in f.edits])


# ------------------------------------------------------------------------------------------
# One file


def run_rules(
    source: SourceFile,
    ctx: RuleContext,
    rules: Sequence[Transform],
    lines_by_rule: Optional[Mapping[str, Iterable[int]]] = None,
) -> list:
    """Every rule's outcomes on one parsed file (dynamic mode when ``lines_by_rule`` is given)."""
    outcomes: list = []
    for rule in rules:
        if not ctx.selects(rule.code) or not rule.prefilter(source.text):
            continue
        if lines_by_rule is None:
            lines = None
        else:
            lines = set(lines_by_rule.get(rule.code, ()))
            if not lines:
                continue
        outcomes.extend(source.own_line_ending(o) if isinstance(o, Fix) else o for o in rule.run(source, ctx, lines))
    return outcomes


def fix_text(
    path: str,
    text: str,
    ctx: RuleContext,
    rules: Optional[Sequence[Transform]] = None,
    lines_by_rule: Optional[Mapping[str, Iterable[int]]] = None,
    *,
    rounds: int = 1,
) -> FileResult:
    """Run the rules on one file's text and apply what may be applied.

    With ``rounds > 1`` (static mode only: break lines move once the text changes) the rules
    run again on the result until nothing changes, so fixes skipped for overlapping an
    earlier one get their turn. Declines/failures reported are those of the last round plus
    any earlier site that was not fixed later.
    """
    if rules is None:
        from graphmend.transforms.registry import all_rules

        rules = all_rules()
    if lines_by_rule is not None:
        rounds = 1
    current = text
    applied: list[Fix] = []
    skipped: list[Skipped] = []
    declined: list[Decline] = []
    failed: list[Failure] = []
    suppressed: list[Suppressed] = []
    for _ in range(max(1, rounds)):
        try:
            source = SourceFile(path, current)
        except SourceError as exc:
            return FileResult(path, text, text, error=str(exc))
        outcomes = run_rules(source, ctx, rules, lines_by_rule)
        fixes = [o for o in outcomes if isinstance(o, Fix)]
        declined = [o for o in outcomes if isinstance(o, Decline)]
        failed = [o for o in outcomes if isinstance(o, Failure)]
        suppressed = [o for o in outcomes if isinstance(o, Suppressed)]
        chosen, skipped = choose_fixes(fixes, ctx.threshold)
        if not chosen:
            break
        try:
            new = apply_edits(current, [e for f in chosen for e in f.edits])
        except EditConflict as exc:
            failed.extend(Failure(f.rule, path, f.line, str(exc)) for f in chosen)
            break
        try:
            SourceFile(path, new)
        except SourceError as exc:
            # A rule produced code that does not parse: a bug; keep the file as it was.
            failed.extend(Failure(f.rule, path, f.line, f"the rewrite does not parse: {exc}") for f in chosen)
            break
        applied.extend(chosen)
        if new == current:
            break
        current = new
    return FileResult(
        path=path,
        original=text,
        text=current,
        applied=tuple(applied),
        skipped=tuple(skipped),
        declined=tuple(declined),
        failed=tuple(failed),
        suppressed=tuple(suppressed),
    )


def fix_bytes(path: str, data: bytes, ctx: RuleContext, rules: Optional[Sequence[Transform]] = None,
              lines_by_rule: Optional[Mapping[str, Iterable[int]]] = None, *, rounds: int = 1) -> FileResult:
    """``fix_text`` for raw file content: binary or non-UTF-8 files become an error result."""
    try:
        SourceFile.from_bytes(path, data)
    except SourceError as exc:
        shown = data.decode("utf-8", "replace")
        return FileResult(path, shown, shown, error=str(exc))
    return fix_text(path, data.decode("utf-8"), ctx, rules, lines_by_rule, rounds=rounds)


__all__ = [
    "EditConflict",
    "FileResult",
    "Skipped",
    "apply_edits",
    "apply_fix_list",
    "choose_fixes",
    "fix_bytes",
    "fix_text",
    "route_breaks",
    "run_rules",
]
