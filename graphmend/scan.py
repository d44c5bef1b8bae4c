"""``scan()``: the default branch as a whole, for scheduled runs.

A scan is what a team runs first on an existing codebase: every target runs under Dynamo
(the ground truth), files no target reaches get static candidates, and the result goes out
three ways:

- a SARIF 2.1.0 file for code-scanning upload (``graphmend.report.render_check(..., "sarif")``:
  one rule per GB id with its help link, ``partialFingerprints`` from the break fingerprints);
- the step summary (markdown);
- the fixes for one pull request: the fix loop proposes rewrites, ``verify_fixes`` checks each
  alone and all the passing ones together, and only the fixes that passed are kept. Their
  files, as they are with the kept fixes applied, are what ``bot.scan_pr`` commits.

Nothing here talks to GitHub; everything returned is a plain value that goes to JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from bot.scan_pr import Withheld  # a proposed fix that is not in the pull request, and why
from graphmend.config import Config
from graphmend.model import CheckReport, Fix
from graphmend.report import break_code, sort_breaks

Progress = Optional[Callable[[str], None]]


@dataclass(frozen=True)
class ScanFix:
    """One fix going into the scan's pull request, with what shows that it is sound."""

    rule: str
    title: str
    safety: str
    file: str
    line: int
    fingerprint: str
    verification: str  # one line: how it was verified
    breaks_before: Optional[int] = None  # over all targets, the tree before / after every kept fix
    breaks_after: Optional[int] = None
    max_error: Optional[float] = None
    benchmark: str = ""  # one line, or "" when bench did not run


@dataclass(frozen=True)
class ScanFile:
    """A file of the fix pull request: its full new text."""

    path: str
    content: str


@dataclass(frozen=True)
class ScanResult:
    report: CheckReport
    fixes: tuple[ScanFix, ...] = ()
    files: tuple[ScanFile, ...] = ()
    withheld: tuple[Withheld, ...] = ()
    fix_note: str = ""  # why no fixes were proposed, when none were
    # True when the targets were asked for fixes: only then does "no fixes" mean "nothing left
    # to fix" (with --no-fix, or without targets, an open fix pull request is left alone).
    fixes_sought: bool = False

    @property
    def failed(self) -> bool:
        return self.report.failed

    @property
    def exit_code(self) -> int:
        """0 clean; 1 when breaks remain or a target could not run (a crashed target is never green)."""
        return 1 if self.report.failed or self.report.all_breaks else 0


def scan(config: Config, *, propose_fixes: bool = True, bench: bool = False, progress: Progress = None,
         runner: Any = None) -> ScanResult:
    """Check the tree at ``config.root`` and, when asked, find the fixes that verify."""
    from graphmend.check import check

    say = progress or (lambda _m: None)
    say("scan: detecting breaks")
    report = check(config, runner=runner,
                   progress=lambda name, done, total: say(f"scan: target {name} ({done}/{total})" if name else "scan: targets done"))
    if not propose_fixes:
        return ScanResult(report, fix_note="fixes were not asked for")
    if not config.targets:
        return ScanResult(report, fix_note="no targets configured: static candidates are never verified, so none is proposed")
    if not any(b.fixable for t in report.targets for b in t.breaks):
        return ScanResult(report, fix_note="no break found on a target has a rule that fixes it", fixes_sought=True)
    return dataclasses.replace(_fixes(config, report, bench, say, runner), fixes_sought=True)


def scan_shard(config: Config, index: int, count: int, *, progress: Progress = None,
               durations: Optional[dict[str, Optional[float]]] = None) -> tuple[CheckReport, tuple[tuple[str, ...], ...]]:
    """Shard ``index`` of ``count``: its share of the targets, and (shard 1) the static pass,
    unfiltered (``graphmend merge`` drops the candidates in files any shard's targets traced).
    Proposes no fixes: they are verified on the whole tree, by an unsharded scan."""
    from graphmend.check import check
    from graphmend.model import CheckReport as Report
    from graphmend.shard import plan

    say = progress or (lambda _m: None)
    names = [t.name for t in config.targets]
    shares = plan(names, durations or {}, count)
    mine = list(shares[index - 1])
    say(f"scan: shard {index}/{count}: {len(mine)} of {len(names)} target(s)")
    report = Report()
    if mine:
        report = check(config, target_names=mine, static=False,
                       progress=lambda name, done, total: say(f"scan: target {name} ({done}/{total})" if name else "scan: targets done"))
    if index == 1:
        found = check(config, dynamic=False)
        report = dataclasses.replace(report, static=found.static, errors=found.errors)
    return report, shares


def _fixes(config: Config, report: CheckReport, bench: bool, say: Callable[[str], None], runner: Any) -> ScanResult:
    from graphmend.fix import apply_fixes
    from graphmend.model import files_needed
    from graphmend.transforms.engine import apply_edits
    from graphmend.verify import verify_fixes

    say("scan: proposing fixes")
    fixed = apply_fixes(config, write=False, progress=say, runner=runner, verify=False)  # verify_fixes below proves each fix
    withheld: list[Withheld] = []
    originals: dict[str, str] = {}
    candidates: list[Fix] = []
    for fx in fixed.applied:
        if not fx.edits:
            continue
        if any(not config.is_in_paths(e.file) for e in fx.edits):
            withheld.append(Withheld(fx.rule, fx.file, fx.line, "outside `paths`: reported, never edited"))
            continue
        try:
            for e in fx.edits:
                originals.setdefault(e.file, (config.root / e.file).read_text(encoding="utf-8"))
            for rel in {e.file for e in fx.edits}:
                apply_edits(originals[rel], [e for e in fx.edits if e.file == rel])
        except Exception as exc:  # noqa: BLE001 - EditConflict, an unreadable file: not in the PR
            # A later round of the fix loop edits text an earlier round produced; its line
            # numbers are not the default branch's, so it cannot be committed on its own.
            withheld.append(Withheld(fx.rule, fx.file, fx.line, f"does not apply to the scanned tree: {exc}"))
            continue
        candidates.append(fx)
    for f in fixed.failed:
        withheld.append(Withheld(f.rule, f.file, f.line, f.error or "the fix failed"))
    if not candidates:
        return ScanResult(report, withheld=tuple(withheld), fix_note="no fix applies to the scanned tree")

    say(f"scan: verifying {len(candidates)} fix(es)")
    verified = verify_fixes(config, candidates, runner=runner, progress=say)
    kept = verified.kept(candidates)
    for fx, v in zip(candidates, verified.fixes):
        if not v.ok:
            withheld.append(Withheld(fx.rule, fx.file, fx.line, f"failed verification: {v.reason}"))
    before = _total(t.breaks_before for t in verified.targets)
    after = _total(t.breaks_after for t in verified.targets)
    errors = [t.max_abs_error_compiled for t in verified.targets if t.max_abs_error_compiled is not None]
    max_error = max(errors) if errors else None
    cases = sum(t.cases for t in verified.targets)
    line, withdrawn = _bench(config, report, kept, say) if bench and kept else ("", {})
    if withdrawn:  # made a target slower: out of the pull request, with the target and its ratio
        withheld.extend(Withheld(fx.rule, fx.file, fx.line, withdrawn[i]) for i, fx in enumerate(kept) if i in withdrawn)
        kept = tuple(fx for i, fx in enumerate(kept) if i not in withdrawn)
        # The counts were measured with the withdrawn fixes applied too.
        before = after = None
    kept_ids = {id(fx) for fx in kept}

    fixes = []
    for fx, v in zip(candidates, verified.fixes):
        if not v.ok or id(fx) not in kept_ids:
            continue
        how = "alone and together with the other fixes" if v.together else "alone"
        fixes.append(ScanFix(
            rule=fx.rule, title=fx.title, safety=fx.safety.value, file=fx.file, line=fx.line, fingerprint=fx.fingerprint,
            verification=f"equivalent on {cases} input case(s) across {len(verified.targets)} target(s), verified {how}",
            breaks_before=before, breaks_after=after, max_error=max_error,
            benchmark=line,
        ))
    files = []
    for rel in sorted({e.file for fx in kept for e in fx.edits}):
        new = apply_edits(originals[rel], [e for fx in kept for e in fx.edits if e.file == rel])
        files.append(ScanFile(rel, new))
    # The whole files the kept fixes need (the package's runtime module), created or updated.
    files.extend(ScanFile(f.path, f.text) for f in files_needed(kept) if f.action != "unchanged")
    files.sort(key=lambda f: f.path)
    fixes.sort(key=lambda f: (f.file, f.line, f.rule))
    withheld.sort(key=lambda w: (w.file, w.line, w.rule))
    return ScanResult(report, tuple(fixes), tuple(files), tuple(withheld),
                      "" if fixes else "no proposed fix passed verification" if not withdrawn
                      else "every verified fix made a target slower")


def _total(values: Any) -> Optional[int]:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _bench(config: Config, report: CheckReport, kept: tuple[Fix, ...], say: Callable[[str], None]) -> tuple[str, dict[int, str]]:
    """Cold start and steady state before vs after the kept fixes, as one line (bench runs on a
    copy), and the kept fixes to withdraw, by position, because a target they reach got slower."""
    from graphmend.bench import bench_fixes
    from graphmend.bench.stats import judged
    from graphmend.bench.withdraw import withdrawals

    try:
        measured = bench_fixes(config, kept, progress=say)
    except Exception as exc:  # noqa: BLE001 - the PR goes out without numbers, and says why
        return f"bench failed: {type(exc).__name__}: {exc}"[:300], {}
    parts = []
    for t in measured.targets:
        if t.error or not t.points:
            continue
        p = t.points[0]
        parts.append(f"{t.name}: steady state {p.before.steady_s * 1000:.2f} ms -> {p.after.steady_s * 1000:.2f} ms "
                     f"{judged(p.steady_ratio, p.steady_ci, p.steady_verdict)}, cold start {p.before.cold_start_s:.2f} s "
                     f"-> {p.after.cold_start_s:.2f} s {judged(p.cold_start_ratio, p.cold_start_ci, p.cold_start_verdict)}")
    reads = {t.name: t.depends_on for t in report.targets}
    return "; ".join(parts), withdrawals(measured, dict(enumerate(kept)), reads)


# ---------------------------------------------------------------------------------------------
# Outputs


def render_sarif(result: ScanResult) -> str:
    from graphmend.report import render_check

    return render_check(result.report, "sarif")


def _cell(text: str) -> str:
    """Untrusted text (Dynamo's reasons quote user code) for one markdown table cell."""
    text = " ".join(str(text).split())[:300]
    for ch in "\\`*_[]<>|#!":
        text = text.replace(ch, "\\" + ch)
    return text


def summary_markdown(result: ScanResult) -> str:
    """The step summary: counts per target, every break, and what the fix PR holds."""
    report = result.report
    breaks = sort_breaks(report.all_breaks)
    lines = ["## GraphMend scan", ""]
    lines.append(f"**{len(breaks)}** graph break(s) found; **{sum(1 for b in breaks if b.fixable)}** with a rule that "
                 f"fixes it; **{len(result.fixes)}** verified fix(es) ready.")
    lines.append("")
    if report.targets:
        lines += ["| target | breaks | graphs | status |", "|---|---:|---:|---|"]
        for t in sorted(report.targets, key=lambda t: t.name):
            status = f"could not run: {_cell(t.error)}" if t.error else "ran"
            lines.append(f"| {_cell(t.name)} | {t.break_count} | {t.graph_count} | {status} |")
        lines.append("")
    if breaks:
        lines += ["| where | code | reason | fix |", "|---|---|---|---|"]
        for b in breaks:
            kind = "static candidate" if not b.verified else ""
            fix = b.rule if b.fixable and b.rule else (_cell(b.lever_reason) or "none known")
            lines.append(f"| `{_cell(b.file)}:{b.line}` | {break_code(b)} | {_cell(b.reason)}{' (' + kind + ')' if kind else ''} | {fix} |")
        lines.append("")
    if result.fixes:
        lines += ["### Verified fixes", ""]
        for f in result.fixes:
            lines.append(f"- `{_cell(f.file)}:{f.line}` {f.rule}: {_cell(f.title)} ({f.verification})")
        lines.append("")
    if result.withheld:
        lines += ["### Proposed but withheld", ""]
        for w in result.withheld:
            lines.append(f"- `{_cell(w.file)}:{w.line}` {w.rule}: {_cell(w.reason)}")
        lines.append("")
    if result.fix_note:
        lines += [f"_{_cell(result.fix_note)}_", ""]
    for e in report.errors:
        lines.append(f"- error: `{_cell(e.path)}`: {_cell(e.message)}")
    return "\n".join(lines).rstrip() + "\n"
