"""Readable renderings of verify and bench reports: terminal text and markdown tables.

Pure functions of the report values (no torch, no I/O), so the demo, the CLI and the bot's
benchmark comment render the same bytes for the same report.
"""

from __future__ import annotations

from typing import Optional

from graphmend.bench.results import BenchReport
from graphmend.bench.stats import judged
from graphmend.verify.results import TargetVerification, VerifyReport

__all__ = ["render_verify_text", "render_verify_markdown", "render_bench_text", "render_bench_markdown", "bench_overall"]


def _count(before: Optional[int], after: Optional[int]) -> str:
    b = "?" if before is None else str(before)
    a = "?" if after is None else str(after)
    return f"{b} → {a}"


def _verdict(t: TargetVerification) -> str:
    if t.error:
        return "could not run"
    if t.unaffected:
        return "unaffected"
    return "equivalent" if t.ok else "DIFFERENT"


def _err(value: float) -> str:
    return f"{value:.2g}"


def _ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "–"
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _x(ratio: Optional[float]) -> str:
    return "–" if ratio is None else f"{ratio:.2f}×"


def _rounds(n: int) -> str:
    return "1 run per arm" if n == 1 else f"{n} runs per arm interleaved (A B A B)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------------------------
# verify


def _no_change(report: VerifyReport) -> str:
    ran = " (the targets ran anyway, as a check of verify itself)" if report.targets else \
        " (nothing run; --run-unchanged runs the targets anyway)"
    return f"no source change: the working tree is identical to {report.base}{ran}"


def render_verify_text(report: VerifyReport) -> str:
    lines = [f"verify: before = {report.base}, after = the working tree" if report.base != "working tree"
             else "verify: fixes on copies of the working tree"]
    if report.source_changed is False:
        lines.append(f"  {_no_change(report)}")
    for t in report.targets:
        env = t.environment
        lines.append(f"  {t.name}: {_verdict(t)}  graphs {_count(t.graphs_before, t.graphs_after)}  "
                     f"breaks {_count(t.breaks_before, t.breaks_after)}  recompiles {_count(t.recompiles_before, t.recompiles_after)}  "
                     f"cases {t.cases}  "
                     f"max abs err eager {_err(t.max_abs_error_eager)} compiled {_err(t.max_abs_error_compiled)}  "
                     f"[torch {env.torch_version}, {env.device}, {env.dtype}, {env.backend}]")
        if t.error:
            lines.append(f"    error: {t.error}")
        if t.unaffected:
            lines.append(f"    {t.unaffected}")
        for note in t.baseline:
            lines.append(f"    baseline: {note}")
        for m in t.mismatches:
            where = f" {m.case}" if m.case else ""
            lines.append(f"    {m.kind} ({m.check}{where}): {m.detail}")
    for f in report.fixes:
        state = "passed" if f.ok else "WITHDRAWN"
        lines.append(f"  fix {f.rule} {f.file}:{f.line}: {state}" + (f" - {f.reason}" if f.reason else ""))
    for e in report.errors:
        lines.append(f"  error: {e}")
    ok = not report.failed
    if report.source_changed is False and not report.targets:
        lines.append("result: no source change")
    else:
        lines.append("result: " + ("every target equivalent" if ok else "verification FAILED"))
    return "\n".join(lines) + "\n"


def render_verify_markdown(report: VerifyReport) -> str:
    out = ["### GraphMend verify", ""]
    base = "the working tree with the fixes applied" if report.base == "working tree" else f"`{report.base}` → working tree"
    out.append(f"Before → after: {base}{' (gradients compared)' if report.grad else ''}.")
    out.append("")
    if report.source_changed is False:
        out += [f"**{_no_change(report).replace('--run-unchanged', '`--run-unchanged`')}.**", ""]
        if not report.targets:
            return "\n".join(out) + "\n"
    out.append("| target | verdict | graphs | breaks | cases | max abs err (eager / compiled) | environment |")
    out.append("|---|---|---|---|---|---|---|")
    for t in report.targets:
        env = t.environment
        out.append(f"| `{_cell(t.name)}` | {_verdict(t)} | {_count(t.graphs_before, t.graphs_after)} | "
                   f"{_count(t.breaks_before, t.breaks_after)} | {t.cases} | "
                   f"{_err(t.max_abs_error_eager)} / {_err(t.max_abs_error_compiled)} | "
                   f"torch {env.torch_version}, {env.device}, {env.dtype}, {env.backend} |")
    notes = [(t, note) for t in report.targets for note in t.baseline]
    if notes:
        out.append("")
        out += [f"- `{_cell(t.name)}` baseline: {_cell(note)}" for t, note in notes]
    problems = [(t, m) for t in report.targets for m in t.mismatches]
    errors = [t for t in report.targets if t.error]
    if problems or errors:
        out += ["", "<details><summary>Differences</summary>", ""]
        for t in errors:
            out.append(f"- `{t.name}`: could not run: {_cell(t.error or '')}")
        for t, m in problems:
            where = f", {m.case}" if m.case else ""
            out.append(f"- `{t.name}` {m.kind} ({m.check}{where}): {_cell(m.detail)}")
        out += ["", "</details>"]
    if report.fixes:
        out += ["", "| fix | where | alone | together | verdict |", "|---|---|---|---|---|"]
        for f in report.fixes:
            together = "–" if f.together is None else ("pass" if f.together else "fail")
            verdict = "passed" if f.ok else f"withdrawn: {_cell(f.reason)}"
            out.append(f"| {f.rule} | `{f.file}:{f.line}` | {'pass' if f.alone else 'fail'} | {together} | {verdict} |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# bench


def _judged(ratio: Optional[float], ci: Optional[tuple[float, float]], verdict: Optional[str], bold: bool = False) -> str:
    """``1.40× [1.31–1.52] faster`` (``stats.judged``), the verdict in bold when it is not no-change."""
    if ratio is None:
        return "–"
    word = verdict or "no-change"
    return judged(ratio, ci, f"**{word}**" if bold and word != "no-change" else word)


def _bench_header(report: BenchReport) -> str:
    load = "" if report.load_average is None else f", load average {report.load_average:g}"
    if report.load_average is not None and report.load_average_after is not None:
        load += f" → {report.load_average_after:g}"
    return (f"{_rounds(report.rounds)}, warmup {report.warmup}, median of {report.repeat}, {report.threads} threads{load}; "
            f"ratios over the rounds with {report.confidence:.0%} intervals, changes under {report.min_effect:.0%} are no-change")


def _busy(report: BenchReport) -> str:
    """A warning when other work had every CPU busy: a worker thread waiting for a CPU stalls
    its siblings at each parallel region, and a call can take a hundred times longer."""
    if not report.busy:
        return ""
    threads = " and use --threads 1 (threads wait on each other when CPUs are taken)" if report.threads > 1 else ""
    return (f"the machine is busy (load average {report.load_average:g} on {report.cpus} CPUs): timings will be noisy; "
            f"stop other work{threads}")


def _same_source(report: BenchReport) -> str:
    return f"no source change between `{report.base}` and the working tree"


def bench_overall(report: BenchReport) -> str:
    """One line of verdict counts over every target's first batch size, e.g.
    ``steady state: 2 faster, 0 slower, 3 no-change``."""
    firsts = [t.points[0] for t in report.targets if t.points]
    parts = []
    for label, attr in (("cold start", "cold_start_verdict"), ("steady state", "steady_verdict")):
        verdicts = [getattr(p, attr) for p in firsts]
        parts.append(f"{label}: " + ", ".join(f"{verdicts.count(v)} {v}" for v in ("faster", "slower", "no-change")))
    return "; ".join(parts)


def render_bench_text(report: BenchReport) -> str:
    if not report.measured:
        return (f"bench: {_same_source(report).replace('`', '')}: nothing measured "
                "(--aa measures anyway, as an A/A check of this machine's noise)\n")
    lines = [f"bench: before = {report.base}, after = the working tree ({_bench_header(report)})"]
    if report.busy:
        lines.append(f"  ! {_busy(report)}")
    if report.source_changed is False:
        lines.append(f"  A/A check: {_same_source(report).replace('`', '')}; every verdict should be no-change")
    for t in report.targets:
        env = t.environment
        lines.append(f"  {t.name} [torch {env.torch_version}, {env.device}, {env.dtype}, {env.backend}]")
        if t.error:
            lines.append(f"    error: {t.error}")
        for p in t.points:
            batch = "inputs" if p.batch_size is None else f"batch {p.batch_size}"
            syncs = (f"  syncs/call {p.before.cuda_syncs_per_call:g} → {p.after.cuda_syncs_per_call:g}"
                     if p.before.cuda_syncs_per_call is not None and p.after.cuda_syncs_per_call is not None else "")
            lines.append(f"    {batch}: graphs {p.before.graph_count} → {p.after.graph_count}{syncs}")
            lines.append(f"      cold start    {_ms(p.before.cold_start_s):>9} → {_ms(p.after.cold_start_s):<9}  "
                         f"{_judged(p.cold_start_ratio, p.cold_start_ci, p.cold_start_verdict)}")
            lines.append(f"      steady state  {_ms(p.before.steady_s):>9} → {_ms(p.after.steady_s):<9}  "
                         f"{_judged(p.steady_ratio, p.steady_ci, p.steady_verdict)}")
            if p.throughput_ratio is not None and p.before.throughput and p.after.throughput:
                lines.append(f"      throughput    {p.before.throughput:>7.4g}/s → {p.after.throughput:<7.4g}/s  "
                             f"{_judged(p.throughput_ratio, p.throughput_ci, p.throughput_verdict)}")
            if p.eager_ratio is not None:
                lines.append(f"      eager         {_ms(p.before.eager_steady_s):>9} → {_ms(p.after.eager_steady_s):<9}  "
                             f"{_judged(p.eager_ratio, p.eager_ci, p.eager_verdict)}"
                             + (f"  (compiled is {_x(p.eager_speedup_after)} eager after)" if p.eager_speedup_after else ""))
            if p.noise:
                lines.append(f"      ! {p.noise}")
    if any(t.points for t in report.targets):
        lines.append(f"  overall: {bench_overall(report)}")
    return "\n".join(lines) + "\n"


def render_bench_markdown(report: BenchReport) -> str:
    if not report.measured:
        return (f"### GraphMend bench\n\n{_same_source(report).capitalize()}: nothing measured "
                "(`--aa` measures anyway, as an A/A check of the machine's noise).\n")
    out = ["### GraphMend bench", "",
           f"`{report.base}` → working tree; fresh processes per arm, {_bench_header(report)}. "
           "Ratios above 1× mean the fix helps; [low–high] is the interval.",
           ""]
    if report.source_changed is False:
        out += [f"A/A check: {_same_source(report)}; every verdict should be no-change.", ""]
    if report.busy:
        out += [f"⚠️ {_cell(_busy(report)).capitalize()}.", ""]
    out += ["| target | batch | graphs | cold start | × | steady state | × | throughput × | eager | syncs/call |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for t in report.targets:
        if t.error:
            out.append(f"| `{_cell(t.name)}` | – | – | could not run: {_cell(t.error)} | | | | | | |")
            continue
        for p in t.points:
            syncs = "–"
            if p.before.cuda_syncs_per_call is not None and p.after.cuda_syncs_per_call is not None:
                syncs = f"{p.before.cuda_syncs_per_call:g} → {p.after.cuda_syncs_per_call:g}"
            eager = "–" if p.eager_ratio is None else (
                f"{_ms(p.before.eager_steady_s)} → {_ms(p.after.eager_steady_s)}, {_judged(p.eager_ratio, p.eager_ci, p.eager_verdict)}")
            out.append(
                f"| `{_cell(t.name)}` | {'–' if p.batch_size is None else p.batch_size} | "
                f"{p.before.graph_count} → {p.after.graph_count} | "
                f"{_ms(p.before.cold_start_s)} → {_ms(p.after.cold_start_s)} | "
                f"{_judged(p.cold_start_ratio, p.cold_start_ci, p.cold_start_verdict, bold=True)} | "
                f"{_ms(p.before.steady_s)} → {_ms(p.after.steady_s)} | {_judged(p.steady_ratio, p.steady_ci, p.steady_verdict, bold=True)} | "
                f"{_judged(p.throughput_ratio, p.throughput_ci, p.throughput_verdict, bold=True)} | {eager} | {syncs} |")
            if p.noise:
                batch = "" if p.batch_size is None else f" batch {p.batch_size}"
                notes.append(f"- `{_cell(t.name)}`{batch}: {_cell(p.noise)}")
    if any(t.points for t in report.targets):
        out += ["", f"Overall: {bench_overall(report)}."]
    if notes:
        out += [""] + notes
    envs = sorted({(t.environment.torch_version, t.environment.device, t.environment.dtype, t.environment.backend)
                   for t in report.targets if not t.error})
    for torch_version, device, dtype, backend in envs:
        out.append("")
        out.append(f"Environment: torch {torch_version}, {device}, {dtype}, backend {backend}.")
    return "\n".join(out) + "\n"
