"""``--format github``: GitHub Actions workflow commands, one annotation per finding.

``::warning file=F,line=L,col=C,title=T::message``. GitHub reads ``%``, CR and LF as escapes in
the message, and additionally ``:`` and ``,`` in property values (they separate properties), so
every value is escaped, or a reason containing ``a, b`` would cut the title short.
"""

from __future__ import annotations

import re
from typing import Optional

from graphmend.model import CheckReport, GraphBreak
from graphmend.report import break_code, lever_note, sort_breaks


# The Actions runner reads a log line as a command when it starts with "::" or holds, in the old
# syntax, "##[": a target's error text or a file's message is the pull request's to
# choose, and "::add-mask::", "::stop-commands::" or "::error::" at a line start would steer
# the job's log. The runner trims leading whitespace (any Unicode space) before it looks for "::",
# and reads the old "##[command]" syntax anywhere in a line. A zero-width space between the two
# characters keeps the text readable and inert.
_COMMAND_START = re.compile(r"^([^\S\n]*):(?=:)", re.MULTILINE)


def neutralise(text: str) -> str:
    """``text`` (untrusted, possibly many lines) made safe to print into a GitHub Actions log."""
    return _COMMAND_START.sub("\\1:\u200b", text).replace("##[", "#\u200b#[")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: Optional[object]) -> str:
    shown = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{kind}{' ' + shown if shown else ''}::{escape_data(message)}"


def _annotation(b: GraphBreak, target: Optional[str]) -> str:
    file, line, col, note = b.file, b.line, b.col, ""
    if b.outside_paths or b.file.startswith("/"):
        inside = [f for f in b.stack if f.inside_repo and not f.file.startswith("/")]
        if inside:
            file, line, col = inside[-1].file, inside[-1].line, None
        else:
            file = line = col = None
        note = f" (the break itself is at {b.file}:{b.line}, outside the repository)"
    code = break_code(b)
    title = code if code == b.category.value else f"{code} {b.category.value}"
    title += f" [{target}]" if target else " (unverified)"
    message = b.reason + note
    message += lever_note(b)
    if b.hits > 1:
        message += f" ({b.hits} hits)"
    return command("warning", message, file=file, line=line, col=(col + 1) if col is not None else None, title=title)


def render_github(report: CheckReport) -> str:
    out: list[str] = []
    targets = sorted(report.targets, key=lambda t: t.name)
    for t in targets:
        if t.error:
            out.append(command("error", t.error, title=f"GraphMend: target {t.name} could not run"))
        for b in sort_breaks(t.breaks):
            out.append(_annotation(b, t.name))
    for b in sort_breaks(report.static):
        out.append(_annotation(b, None))
    for e in sorted(report.errors, key=lambda e: (e.path, e.message)):
        inside = not e.path.startswith("/") and not e.path.startswith("..")
        out.append(command("error", e.message, file=e.path if inside else None, title=f"GraphMend: cannot read {e.path}"))
    return "\n".join(out) + ("\n" if out else "")
