"""Fixes that made a target slower are withdrawn, whoever benchmarked them (``pr``, ``scan``).

``bench_fixes`` measures the tree against it with every verified fix applied; a target whose
steady state bench judges ``slower`` (its interval below 1 and the change at least the minimum
effect, ``graphmend.bench.stats``) takes back the fixes that can reach it: those editing a file
the target's Dynamo run read (``depends_on``), or all of them when the target kept no such
record. ``no-change`` withdraws nothing: neither a ratio inside the noise nor a machine too
noisy to decide is evidence of a slowdown. Cold start is not judged here: fewer graphs can
compile longer once and still run faster ever after.
"""

from __future__ import annotations

from typing import Collection, Mapping, Optional, TypeVar

from graphmend.bench.results import BenchReport
from graphmend.bench.stats import SLOWER, judged
from graphmend.model import Fix

K = TypeVar("K")


def slower_targets(report: BenchReport) -> dict[str, str]:
    """Each target bench judged slower with the fixes, and the figure that shows it, e.g.
    ``steady state 0.80× [0.74–0.86] slower``; a target measured at several batch sizes is
    slower when any of them is."""
    out: dict[str, str] = {}
    for t in report.targets:
        worst = [p for p in t.points if p.steady_verdict == SLOWER]
        if t.error or not worst:
            continue
        p = min(worst, key=lambda p: p.steady_ratio)
        batch = "" if p.batch_size is None else f" at batch size {p.batch_size}"
        out[t.name] = f"steady state {judged(p.steady_ratio, p.steady_ci, p.steady_verdict)}{batch}"
    return out


def withdrawals(report: BenchReport, fixes: Mapping[K, Fix], reads: Mapping[str, Optional[Collection[str]]]) -> dict[K, str]:
    """The fixes of ``fixes`` to withdraw, each with one line that names the fix, the targets it
    made slower and their ratios: ``withdrawn: made tiny slower (steady state 0.80× [...] slower
    with the verified fixes applied)``. ``reads``: the files each target read (``None``: unknown)."""
    slow = slower_targets(report)
    out: dict[K, str] = {}
    for key, fx in fixes.items():
        hit = [name for name in sorted(slow) if _reaches(fx, reads.get(name))]
        if not hit:
            continue
        figures = "; ".join(f"{name}: {slow[name]}" for name in hit)
        out[key] = (f"{fx.rule} fix withdrawn: made {', '.join(hit)} slower ({figures}, "
                    f"{len(fixes)} verified fix(es) applied together)")
    return out


def _reaches(fix: Fix, read: Optional[Collection[str]]) -> bool:
    return read is None or bool(set(fix.edited_files) & set(read))
