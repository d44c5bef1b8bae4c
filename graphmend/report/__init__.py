"""Reports of ``graphmend check``: text (ruff-like), json, sarif and GitHub workflow commands.

``render_check(report, fmt)`` is the one entry point; every format sorts findings the same way
(path, line, code) so that the same report always renders to the same bytes.
"""

from __future__ import annotations

from typing import Iterable

from graphmend.model import CheckReport, GraphBreak, Lever

FORMATS = ("text", "json", "sarif", "github")

__all__ = ["FORMATS", "render_check", "sort_breaks", "break_code", "lever_note", "lever_text"]


def break_code(b: GraphBreak) -> str:
    """The code a break is listed under: Dynamo's GB id, else the GM rule, else the category."""
    return b.gb_id or b.rule or b.category.value


def lever_note(b: GraphBreak) -> str:
    """What removes the break, as a suffix for one-line reports: the rule that fixes it (a promise:
    ``check`` labels a break fixable only when the rule produced the fix), a compile setting a run
    showed to help (and the GM5xx lever that scopes it around every call), or why nothing does."""
    if b.fixable and b.rule:
        return f" [fixable ({b.rule})]"
    text = lever_text(b)
    return f" [{text}]" if text else ""


def lever_text(b: GraphBreak) -> str:
    """The lever of a break that no source rule fixes, as a phrase ('' when nothing is known)."""
    if b.lever is Lever.CONFIG:
        from graphmend.rules import CONFIG_RULES

        code = next((c for setting, c in CONFIG_RULES.items() if setting in b.lever_reason), None)
        return f"config: {b.lever_reason or 'a compile setting'}{f' ({code})' if code else ''}"
    if b.lever is Lever.NONE and b.lever_reason:
        return f"not fixable: {b.lever_reason}"
    return ""


def sort_breaks(breaks: Iterable[GraphBreak]) -> tuple[GraphBreak, ...]:
    return tuple(sorted(breaks, key=lambda b: (b.file, b.line, break_code(b), b.col or 0, b.fingerprint)))


def render_check(report: CheckReport, fmt: str = "text") -> str:
    """``report`` in format ``fmt`` (one of ``FORMATS``); ValueError for an unknown format."""
    if fmt == "text":
        from graphmend.report.text import render_text

        return render_text(report)
    if fmt == "json":
        from graphmend.report.jsonout import render_json

        return render_json(report)
    if fmt == "sarif":
        from graphmend.report.sarif import render_sarif

        return render_sarif(report)
    if fmt == "github":
        from graphmend.report.github import render_github

        return render_github(report)
    raise ValueError(f"unknown report format {fmt!r} (expected one of: {', '.join(FORMATS)})")
