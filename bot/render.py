"""Markdown for the review, its inline comments, the sticky comment and the step summary.

Everything that comes from review.json is untrusted (it was written next to the pull
request's code): one-line texts go through ``escape`` (HTML entities for ``<>&"``, backslashes
for markdown, no @-mentions, no autolinks), code goes only inside a fence longer than any
backtick run in it, and links are built here from checked ids, never taken from the input.
Output is deterministic (sorted, no timestamps) so a re-run can compare and skip.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Iterable, Optional

from bot import markers
from bot.diff_filter import Placement, Plan
from bot.gate import Verdict, is_new
from bot.review import Benchmark, Finding, FixProposal, Review, TargetSummary
from bot.patch import fix_changes, patch_text, shown_lines
from bot.suggest import APPLY, SUGGESTION, Delivery, files_needed, split_lines
from graphmend.sources import line_text

# GitHub rejects bodies over 65,536 characters; keep a margin for the markers.
BODY_LIMIT = 65_000
MAX_CHART_TARGETS = 30  # a chart with more bars is unreadable anyway
GB_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{}.html"

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


# Characters a reader of the rendered review cannot see but that change what a text is (Trojan
# Source, CVE-2021-42574): bidirectional embeddings, overrides, isolates and marks, zero-width and
# other format characters, tags, control characters other than the whitespace of Python source,
# line and paragraph separators, private-use and surrogate code points, and the Hangul fillers
# (letters that render blank).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs"})
_SHOWN_CONTROLS = frozenset("\t\n\r\x0c")
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def _hidden(c: str) -> bool:
    return c not in _SHOWN_CONTROLS and (unicodedata.category(c) in _HIDDEN_CATEGORIES or c in _BLANK_LETTERS)


def _shown(text: str) -> str:
    """``text`` with each hidden character replaced by U+FFFD."""
    return "".join("\ufffd" if _hidden(c) else c for c in text)


def hidden_characters(text: str) -> str:
    """"" when every character of ``text`` shows as itself where GitHub renders it; else the
    first one that does not, as ``U+XXXX``."""
    return next((f"U+{ord(c):04X}" for c in text if _hidden(c)), "")


def escape(text: Optional[str], limit: int = 300) -> str:
    """Untrusted text as one inert line of markdown (hidden characters shown as U+FFFD)."""
    text = _shown(" ".join(str(text or "").split()))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # no pings, no autolinked URLs, no emoji shortcodes turning into something else
    return text.replace("@", "&#64;").replace("://", "&#58;//")


def code_span(text: str, *, in_table: bool = False) -> str:
    """Untrusted short text (a path) as inline code that cannot be broken out of, hidden
    characters shown as U+FFFD (a right-to-left override made ``src/<U+202E>yp.live`` read as
    another file's name). In a table cell (``in_table``) a ``|`` is escaped: GitHub splits a
    table row at every unescaped pipe before it reads code spans, so a path could end its cell
    and add markdown (a link) of its own."""
    text = _shown(" ".join(str(text).split())[:200])
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or run else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(code: str, info: str = "") -> str:
    """A fenced block whose fence is longer than any backtick run in ``code``."""
    run = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, run + 1)
    if code and not code.endswith("\n"):
        code += "\n"
    return f"{ticks}{info}\n{code}{ticks}"


def fenced(body: str, info: str) -> list[str]:
    """The contents of the blocks fenced with ``info`` in ``body``, as ``fence`` writes them (an
    opening line of 3+ backticks then ``info``; closed by a line of at least as many backticks
    and nothing else). ``fenced(fence(code, info), info) == [code]`` for code ending in a line
    break. Blocks with another info string are skipped whole, so nothing inside them is read;
    a block never closed is not read."""
    lines = split_lines(body)
    out: list[str] = []
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"(`{3,})([^`]*)", line_text(lines[i]))
        i += 1
        if opening is None:
            continue
        ticks, content = opening.group(1), []
        while i < len(lines) and not re.fullmatch(f"{ticks}`*[ \t]*", line_text(lines[i])):
            content.append(lines[i])
            i += 1
        closed = i < len(lines)
        i += 1
        if closed and opening.group(2) == info:  # an unclosed block is cut: never read as whole
            out.append("".join(content))
    return out


def gb_link(gb_id: Optional[str]) -> str:
    if not gb_id or not re.fullmatch(r"GB\d{4}", gb_id):
        return "graph break"
    return f"[{gb_id}]({GB_URL.format(gb_id.lower())})"


def rule_link(rule: Optional[str]) -> str:
    """A rule code; ``graphmend explain GMxxx`` prints its documentation."""
    if not rule or not re.fullmatch(r"GM\d{3}", rule):
        return ""
    return f"`{rule}`"


def short(sha: str) -> str:
    return sha[:7]


def _num(value: Optional[float], unit: str = "", fmt: str = "{:.2f}") -> str:
    if value is None:
        return "—"
    return fmt.format(value) + unit


def _speedup(ratio: Optional[float], ci: Optional[tuple[float, float]], verdict: Optional[str]) -> str:
    """``1.50× [1.31–1.72] faster``; a ratio without a verdict is shown bare, never called faster."""
    if ratio is None:
        return "—"
    interval = f" [{ci[0]:.2f}–{ci[1]:.2f}]" if ci else ""
    word = f" {escape(verdict, 20)}" if verdict else ""
    return f"{ratio:.2f}×{interval}{word}"


def is_faster(b: Optional[Benchmark]) -> bool:
    """A speed claim needs bench's verdict: an interval above 1 and a change worth naming."""
    return b is not None and b.verdict == "faster"


def _err(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.1e}"


# ---------------------------------------------------------------------------------------------
# Inline comments


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body.rstrip()}\n\n</details>"


def verification_block(fix: FixProposal) -> str:
    """The collapsed block with a fix's verification and benchmark."""
    v = fix.verification
    status = v.status if v else "not-run"
    rows = [("status", escape(status)), ("safety", escape(fix.safety))]
    if v is not None:
        if v.breaks_before is not None or v.breaks_after is not None:
            rows.append(("graph breaks, all verified fixes applied", f"{_num(v.breaks_before, fmt='{}')} → {_num(v.breaks_after, fmt='{}')}"))
        rows.append(("max error", _err(v.max_error)))
        if v.detail:
            rows.append(("detail", escape(v.detail)))
    b = fix.benchmark
    if b is not None:
        rows.append(("cold start", f"{_num(b.cold_start_before_s, ' s')} → {_num(b.cold_start_after_s, ' s')}"))
        rows.append(("steady state", f"{_num(b.steady_before_ms, ' ms')} → {_num(b.steady_after_ms, ' ms')}"))
        rows.append(("speedup (steady state)", _speedup(b.speedup, b.speedup_ci, b.verdict)))
    table = "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v_} |" for k, v_ in rows)
    icon = {"passed": "✅", "failed": "❌"}.get(status, "⚪")
    return _details(f"{icon} Verification: {escape(status)}", table)


def finding_title(f: Finding) -> str:
    parts = [f"**{gb_link(f.gb_id)}**"]
    if f.rule:
        parts.append(rule_link(f.rule))
    if f.target:
        parts.append(f"target {code_span(f.target)}")
    return " · ".join(parts)


def _place(path: str, line: int) -> str:
    return code_span(f"{path}:{line}")


def delivery_text(d: Optional[Delivery]) -> str:
    """How a fix reaches the repository, in a few words, and what it adds to it."""
    if d is None:
        return "not offered"
    if d.kind == SUGGESTION:
        n = len(d.blocks)
        text = "one-click suggestion" if n == 1 else f"{n} one-click suggestions, applied together"
        if d.files:
            text += " + the file by `/graphmend apply` or the patch" if d.committable else " + the file as a patch"
    elif d.kind == APPLY:
        text = "`/graphmend apply` (or the patch)"
    else:
        text = "patch"
    adds = adds_markdown(d)
    return text + (f" · {adds}" if adds else "")


def adds_markdown(d: Delivery) -> str:
    """What a fix adds to the repository besides its edits: ``+1 file: `p.py` (new, 180 lines)``."""
    if not d.files:
        return ""
    parts = [f"{code_span(f.path)} ({'new' if f.status == 'created' else 'updated'}, {len(split_lines(f.new_text))} lines)"
             for f in d.files]
    return f"+{len(parts)} file{'s' if len(parts) > 1 else ''}: " + ", ".join(parts)


def inline_comment(p: Placement) -> str:
    f = p.finding
    lines = [markers.finding_marker(f.fingerprint), f"{finding_title(f)}: {escape(f.reason)}", ""]
    fix = f.fix
    if p.suggest and fix is not None and p.block is not None:
        if p.parts > 1:
            others = ", ".join(_place(path, line) for path, line in p.siblings)
            lines.append(f"Suggested fix ({escape(fix.title, 200)}), **{p.part} of {p.parts}**: apply together with "
                         f"the suggestion{'s' if p.parts > 2 else ''} at {others} (*Add suggestion to batch*, then "
                         "commit the batch).")
        else:
            lines.append(f"Suggested fix ({escape(fix.title, 200)}):")
        lines.append("")
        lines.append(fence(p.block.text, "suggestion"))
        if len(p.block.owners) > 1:
            lines += ["", f"This suggestion also carries {len(p.block.owners) - 1} other fix(es) whose edits overlap it."]
        if p.delivery is not None and p.delivery.files:
            lines += ["", f"The fix needs {adds_markdown(p.delivery)}: a suggestion cannot create a file, so it comes "
                      "with `/graphmend apply` or as the patch in the review body; commit it with the suggestion."]
    elif fix is not None and p.delivery is not None and p.delivery.kind == SUGGESTION:
        lines.append(f"Suggested fix ({escape(fix.title, 200)}): {escape(p.note)}.")
    else:
        lines.append(f"No suggestion: {escape(p.note)}.")
        if p.delivery is not None:
            lines += ["", f"Delivery: {delivery_text(p.delivery)}."]
    if fix is not None:
        lines += ["", verification_block(fix)]
    text = "\n".join(lines) + "\n"
    if len(text) > BODY_LIMIT:
        # The suggestion is what makes it long; explain instead of posting a broken fence.
        text = "\n".join(
            [markers.finding_marker(f.fingerprint), f"{finding_title(f)}: {escape(f.reason)}", "",
             "No suggestion: the fix is too long for a review comment; see the patch in the review body."]
        ) + "\n"
    return text


# ---------------------------------------------------------------------------------------------
# Patches for multi-place fixes


def fix_patch(fix: FixProposal, *, with_files: bool = True) -> str:
    """A unified diff of a fix's whole-line edits (``bot.patch``, which reads it back for
    ``/graphmend apply``), and of the files it creates."""
    out = patch_text(fix_changes(fix)).rstrip("\n").split("\n") if fix.edits else []
    for f in fix.files if with_files else ():
        out += file_patch(f.path, f.new_text, f.status).rstrip("\n").split("\n")
    return "\n".join(out) + "\n"


def file_patch(path: str, text: str, status: str) -> str:
    """A new file as a unified diff; an updated one is named (its old text is not at hand)."""
    new = shown_lines(text)
    if status != "created":
        return f"# {path}: replaced by GraphMend's current copy ({len(new)} lines); `graphmend fix` writes it\n"
    return "\n".join(["--- /dev/null", f"+++ b/{path}", f"@@ -0,0 +1,{len(new)} @@"] + ["+" + ln for ln in new]) + "\n"


# ---------------------------------------------------------------------------------------------
# Review body


def _bounded(items: Iterable[str], budget: int, more: str) -> str:
    """Join items until ``budget`` characters; then say how many were left out."""
    items = list(items)
    out: list[str] = []
    used = 0
    for i, item in enumerate(items):
        if used + len(item) + 1 > budget:
            out.append(more.format(n=len(items) - i))
            break
        out.append(item)
        used += len(item) + 1
    return "\n".join(out)


def finding_item(p: Placement) -> str:
    f = p.finding
    where = {"outside": "file not in this diff", "in-file": "line not in this diff"}.get(p.where, "over the inline-comment cap")
    return f"- {code_span(f'{f.file}:{f.line}')} {finding_title(f)}: {escape(f.reason, 200)} ({where})"


def counts_line(review: Review, verdict: Verdict) -> str:
    faster = sum(1 for t in review.targets if is_faster(t.benchmark))
    return f"❌ {verdict.new} new · ✅ {verdict.fixed} fixed · ⚡ {faster} faster"


def headline(verdict: Verdict) -> str:
    icon = "✅" if verdict.passed else "❌"
    return f"{icon} GraphMend: {verdict.headline}"


def _not_suggestions(plan: Plan, budget: int) -> list[str]:
    """The review body's account of what cannot be a suggestion, each with why, then the patches."""
    out = []
    items = []
    for p in plan.patches:
        f, d = p.finding, p.delivery
        assert f.fix is not None and d is not None
        head = f"- {_place(f.file, f.line)} {rule_link(f.fix.rule)} {escape(f.fix.title, 200)}: {delivery_text(d)}"
        items.append(head + (f" — {escape(d.why, 400)}" if d.why else ""))
    fixes = [p.finding.fix for p in plan.patches if p.finding.fix is not None]
    files = files_needed(fixes)
    for fc in files:
        items.append(f"- new file {code_span(fc.path)} ({'new' if fc.status == 'created' else 'updated'}, "
                     f"{len(split_lines(fc.new_text))} lines), needed by the fixes above — a suggestion cannot create "
                     "or replace a whole file")
    if items:
        how = ("comment `/graphmend apply` to have them committed to this branch, or apply the patch"
               if any(p.delivery is not None and p.delivery.committable for p in plan.patches)
               else "the bot cannot push to this branch (a fork that does not allow edits by maintainers): apply the patch")
        out.append(f"**Not one-click** ({how}):\n\n" + _bounded(items, budget // 4, "- …and {n} more"))
    blocks = []
    for p in plan.patches:
        f = p.finding
        assert f.fix is not None
        blocks.append(f"{_place(f.file, f.line)} {rule_link(f.fix.rule)} {escape(f.fix.title, 200)}\n\n"
                      + fence(fix_patch(f.fix, with_files=False), "diff") + "\n")
    for fc in files:
        blocks.append(f"{code_span(fc.path)}\n\n" + fence(file_patch(fc.path, fc.new_text, fc.status), "diff") + "\n")
    if blocks:
        text = _bounded(blocks, budget // 2, "…and {n} more patch(es); run `graphmend fix` locally")
        out.append(_details(f"{len(plan.patches)} verified fix(es) as a patch", text))
    return out


def review_body(review: Review, verdict: Verdict, plan: Plan, *, moved: tuple[Placement, ...] = (),
                fixes_digest: str = "") -> str:
    """The body of the one review per head SHA."""
    parts = [markers.review_marker(review.head_sha)]
    if fixes_digest:
        parts.append(markers.fixes_marker(fixes_digest))
    parts += [
        f"### {headline(verdict)}",
        "",
        f"{counts_line(review, verdict)} · base `{short(review.base_sha)}` → head `{short(review.head_sha)}`",
        "",
    ]
    n_sugg = sum(1 for p in plan.inline if p.suggest)
    n_fix = sum(1 for d in plan.deliveries.values() if d.kind == SUGGESTION)
    parts.append(f"{len(plan.inline)} inline comment(s), {n_sugg} with a verified suggestion"
                 f" ({n_fix} of {len(plan.deliveries)} verified fix(es) one-click).")
    head = "\n".join(parts)
    budget = BODY_LIMIT - len(head) - 500
    rest = []
    outside = tuple(plan.body) + tuple(moved)
    if outside:
        items = _bounded((finding_item(p) for p in outside), budget // 4, "- …and {n} more (see the check run's annotations)")
        rest.append(_details(f"{len(outside)} new finding(s) without an inline comment", items))
    rest += _not_suggestions(plan, budget)
    body = head + ("\n\n" + "\n\n".join(rest) if rest else "") + "\n"
    return body


# ---------------------------------------------------------------------------------------------
# Sticky comment and step summary


def _target_counts(review: Review) -> list[tuple[str, Optional[int], Optional[int], Optional[TargetSummary]]]:
    rows = []
    for t in sorted(review.targets, key=lambda t: t.name):
        base = t.base.break_count if t.base else None
        head = t.head.break_count if t.head else None
        rows.append((t.name, base, head, t))
    static = [f for f in review.findings if f.target is None]
    if static or not review.targets:
        base = sum(1 for f in static if f.status in ("fixed", "unchanged"))
        head = sum(1 for f in static if f.status in ("introduced", "unchanged"))
        rows.append(("(static)", base, head, None))
    return rows


def _target_table(name: str, base: Optional[int], head: Optional[int], t: Optional[TargetSummary]) -> str:
    b = t.benchmark if t else None
    b = b or Benchmark()
    err = ""
    if t is not None:
        errors = [c.error for c in (t.base, t.head) if c is not None and c.error]
        if errors:
            err = "\n\n⚠️ could not run: " + escape(errors[0], 300)
    rows = [
        ("graph breaks (base → head)", f"{_num(base, fmt='{}')} → {_num(head, fmt='{}')}"),
        ("cold start (before → after fixes)", f"{_num(b.cold_start_before_s, ' s')} → {_num(b.cold_start_after_s, ' s')}"),
        ("steady state (before → after fixes)", f"{_num(b.steady_before_ms, ' ms')} → {_num(b.steady_after_ms, ' ms')}"),
        ("cold start speedup", _speedup(b.cold_start_speedup, b.cold_start_ci, b.cold_start_verdict)),
        ("steady state speedup", _speedup(b.speedup, b.speedup_ci, b.verdict)),
        ("max error", _err(b.max_error)),
    ]
    table = "| metric | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"#### {code_span(name)}\n\n{table}{err}"


def mermaid_chart(rows: list[tuple[str, Optional[int], Optional[int], object]]) -> str:
    names = ", ".join(f'"{n}"' for n, *_ in rows)  # target names are checked by the schema
    base = ", ".join(str(b or 0) for _, b, _, _ in rows)
    head = ", ".join(str(h or 0) for _, _, h, _ in rows)
    top = max([1] + [int(b or 0) for _, b, _, _ in rows] + [int(h or 0) for _, _, h, _ in rows])
    return fence(
        "xychart-beta\n"
        '    title "Graph breaks: base (bar) vs head (line)"\n'
        f"    x-axis [{names}]\n"
        f'    y-axis "breaks" 0 --> {top}\n'
        f"    bar [{base}]\n"
        f"    line [{head}]\n",
        "mermaid",
    )


def stages_note(review: Review) -> str:
    skipped = [s for s in review.stages if not s.ran]
    if not skipped:
        return ""
    return "\n".join(f"- ⚠️ {escape(s.name)} did not run: {escape(s.reason, 300)}" for s in skipped)


def deliveries_section(review: Review, deliveries: dict[str, Delivery]) -> str:
    """Per verified fix: how it will be delivered and what it adds to the repository."""
    rows = []
    for f in sorted((f for f in review.findings if f.fingerprint in deliveries and f.fix is not None),
                    key=lambda f: (f.file, f.line, f.fingerprint)):
        rows.append(f"- {_place(f.file, f.line)} {rule_link(f.fix.rule)} {escape(f.fix.title, 200)}: "  # type: ignore[union-attr]
                    f"{delivery_text(deliveries[f.fingerprint])}")
    if not rows:
        return ""
    return _details(f"{len(rows)} verified fix(es): how each is delivered", _bounded(rows, BODY_LIMIT // 4, "- …and {n} more"))


def sticky_body(review: Review, verdict: Verdict, deliveries: Optional[dict[str, Delivery]] = None) -> str:
    """The one benchmark comment, edited in place; byte-identical for the same input."""
    rows = _target_counts(review)
    parts = [
        markers.STICKY,
        f"## {headline(verdict)}",
        "",
        f"base `{short(review.base_sha)}` → head `{short(review.head_sha)}` · {counts_line(review, verdict)}",
    ]
    note = stages_note(review)
    if note:
        parts += ["", note]
    if review.errors:
        items = "\n".join(f"- {code_span(e.path)}: {escape(e.message, 200)}" for e in review.errors[:50])
        parts += ["", _details(f"{len(review.errors)} input(s) could not be read", items)]
    section = deliveries_section(review, deliveries or {})
    if section:
        parts += ["", section]
    head = "\n".join(parts) + "\n"
    chart = mermaid_chart(rows[:MAX_CHART_TARGETS])
    budget = BODY_LIMIT - len(head) - len(chart) - 200
    tables = _bounded((_target_table(*row) + "\n" for row in rows), budget, "…and {n} more target(s): see the step summary\n")
    return head + "\n" + tables + "\n" + chart + "\n"


def check_summary(review: Review, verdict: Verdict, provenance: str = "") -> str:
    """The check run's summary (GitHub allows 65,535 characters): the sticky comment's content,
    where each part comes from (``provenance``, trusted text), what the pull request changes in
    the configuration (the analysis's report), and every new break by file:line."""
    table = new_breaks_table(review, BODY_LIMIT // 3)
    change = next((s.reason for s in review.stages if s.name == "config" and s.reason), "")
    note = "\n" + provenance + "\n" if provenance else ""
    note += "\n> " + escape(change, 1000) + "\n" if change else ""
    text = sticky_body(review, verdict).replace(markers.STICKY + "\n", "")
    room = BODY_LIMIT - len(table) - len(note) - 100
    if len(text) > room:
        text = text[: text.rfind("\n", 0, room) + 1] + "\n…(cut: the step summary has the rest)\n"
    return text + note + table


def summary_markdown(review: Review, verdict: Verdict) -> str:
    """The step summary: the sticky comment's content plus every new finding."""
    return sticky_body(review, verdict).replace(markers.STICKY + "\n", "") + new_breaks_table(review, BODY_LIMIT // 2)


def new_breaks_table(review: Review, budget: int) -> str:
    new = sorted((f for f in review.findings if is_new(f)), key=lambda f: (f.file, f.line))
    if not new:
        return ""
    rows = [
        f"| {code_span(f'{f.file}:{f.line}', in_table=True)} | {gb_link(f.gb_id)} | {rule_link(f.rule) or '—'} | {escape(f.reason, 200)} |"
        for f in new
    ]
    table = "| where | break | rule | reason |\n|---|---|---|---|\n" + _bounded(rows, budget, "| …and {n} more | | | |")
    return "\n### New graph breaks\n\n" + table + "\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Check-run annotations and workflow commands (plain text, not markdown)


def plain(text: Optional[str], limit: int = 1000) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def annotations(review: Review, verdict: Verdict) -> list[dict]:
    level = "warning" if verdict.passed else "failure"
    out = []
    for f in sorted((f for f in review.findings if is_new(f)), key=lambda f: (f.file, f.line, f.fingerprint)):
        title = " ".join(x for x in (f.gb_id or "graph break", f.rule or "") if x)
        out.append(
            {
                "path": f.file,
                "start_line": f.line,
                "end_line": f.line,
                "annotation_level": level,
                "title": plain(title, 200),
                "message": plain(f.reason) + (" (fixable: " + plain(f.fix.title, 200) + ")" if f.fix else ""),
            }
        )
    return out


def _wc_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _wc_prop(text: str) -> str:
    return _wc_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_commands(review: Review, verdict: Verdict) -> list[str]:
    """``::error file=…`` lines that the Actions runner turns into annotations."""
    kind = "warning" if verdict.passed else "error"
    lines = []
    for a in annotations(review, verdict):
        props = f"file={_wc_prop(a['path'])},line={a['start_line']},title={_wc_prop(a['title'])}"
        lines.append(f"::{kind} {props}::{_wc_data(a['message'])}")
    return lines
