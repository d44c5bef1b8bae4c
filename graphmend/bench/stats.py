"""The statistics of ``bench``: a ratio with its confidence interval, and a verdict.

The unit of replication is the fresh process: each round runs one process per arm, so an arm
has one cold start and one steady-state median per round. Within-process samples are not
independent of each other (the same memory layout, the same thread placement), so pooling
them would make a noisy machine look certain — the "1.40× faster on identical trees" failure.

Like Google Benchmark's ``compare.py`` (a Mann-Whitney U test over repetitions), the two arms'
per-process values are compared with a rank method, here the Hodges-Lehmann estimate of the
shift between the arms' log times and its distribution-free confidence interval from the
exact null distribution of Mann-Whitney's U (no ties assumed: timings are continuous). On the
log scale a shift is a ratio: ``exp(shift)`` is "how many times faster after". A 99% interval
needs at least 5 processes per arm (with 4, even the most extreme ordering has p = 2/70).

A verdict is ``faster`` or ``slower`` only when the interval excludes 1 *and* the estimate
is at least ``MIN_EFFECT`` away from it (5%: less is not worth a reviewer's attention and is
within what a CPU's clock and cache state move between processes); otherwise ``no-change``.
Pure Python, no torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

__all__ = ["CONFIDENCE", "DEFAULT_ROUNDS", "MIN_EFFECT", "MIN_ROUNDS", "Comparison", "compare", "judged", "ratio_interval",
           "relative_spread", "verdict"]

# 99%, not 95%: one bench run makes many comparisons (targets × batch sizes × metrics), and on
# identical code a 95% interval misses 1 once in twenty: an A/A run of five targets would then
# usually call something faster. At 99% it takes five processes per arm to have an interval at all.
CONFIDENCE = 0.99
MIN_EFFECT = 0.05
FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no-change"


@lru_cache(maxsize=None)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings of two samples give each value of U (0..n*m)."""
    if n == 0 or m == 0:
        return (1,)
    # The largest value is either from the first sample (it beats all m of the other: U += m)
    # or from the second (it adds nothing to U).
    with_first = _u_counts(n - 1, m)
    with_second = _u_counts(n, m - 1)
    counts = [0] * (n * m + 1)
    for u, c in enumerate(with_first):
        counts[u + m] += c
    for u, c in enumerate(with_second):
        counts[u] += c
    return tuple(counts)


def _rank(n: int, m: int, confidence: float) -> int:
    """The largest k with P(U < k) <= (1 - confidence) / 2; 0 when no interval reaches it."""
    counts = _u_counts(n, m)
    total = math.comb(n + m, n)
    tail = (1.0 - confidence) / 2.0
    k, below = 0, 0
    while k < len(counts) and (below + counts[k]) / total <= tail:
        below += counts[k]
        k += 1
    return k


def _min_rounds(confidence: float) -> int:
    n = 1
    while _rank(n, n, confidence) == 0:
        n += 1
    return n


MIN_ROUNDS = _min_rounds(CONFIDENCE)
# One more than the minimum: with 6 processes per arm the 99% interval drops the 2 most extreme
# of the 36 pairwise ratios at each end instead of spanning all of them.
DEFAULT_ROUNDS = MIN_ROUNDS + 1


def ratio_interval(before: Sequence[float], after: Sequence[float],
                   confidence: float = CONFIDENCE) -> tuple[float, Optional[tuple[float, float]]]:
    """``before / after`` of two samples of positive times: the Hodges-Lehmann estimate and its
    ``confidence`` interval (``None`` when the samples are too small to reach it).

    With one value per arm the estimate is the plain ratio."""
    if not before or not after or min(before) <= 0 or min(after) <= 0:
        raise ValueError("ratio_interval needs positive times in both arms")
    shifts = sorted(math.log(b) - math.log(a) for b in before for a in after)
    estimate = math.exp(statistics.median(shifts))
    k = _rank(len(before), len(after), confidence)
    if k == 0:
        return estimate, None
    return estimate, (math.exp(shifts[k - 1]), math.exp(shifts[len(shifts) - k]))


def verdict(ratio: float, ci: Optional[tuple[float, float]], min_effect: float = MIN_EFFECT) -> str:
    """``faster`` / ``slower`` / ``no-change`` for a "times better after" ratio and its interval."""
    if ci is None:
        return NO_CHANGE
    low, high = ci
    if low > 1.0 and ratio >= 1.0 + min_effect:
        return FASTER
    if high < 1.0 and ratio <= 1.0 / (1.0 + min_effect):
        return SLOWER
    return NO_CHANGE


def judged(ratio: float, ci: Optional[tuple[float, float]], verdict: Optional[str]) -> str:
    """``1.40× [1.31–1.52] faster``: the estimate, its interval and what it means."""
    interval = "no interval" if ci is None else f"{ci[0]:.2f}–{ci[1]:.2f}"
    return f"{ratio:.2f}× [{interval}] {verdict or NO_CHANGE}"


def relative_spread(values: Sequence[float]) -> Optional[float]:
    """Run-to-run spread of one arm: the median absolute deviation over the median, scaled to
    match a standard deviation on normal data (pyperf warns above 10%). ``None`` for one value."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    if middle <= 0:
        return None
    return 1.4826 * statistics.median(abs(v - middle) for v in values) / middle


@dataclass(frozen=True)
class Comparison:
    """One metric, before vs after: ``ratio`` above 1 means better after."""

    ratio: float
    ci: Optional[tuple[float, float]]
    verdict: str
    spread: tuple[Optional[float], Optional[float]]  # run-to-run spread of before, after

    @property
    def undecided(self) -> bool:
        """No interval, or one wide enough to hold both a ``MIN_EFFECT`` gain and a loss."""
        if self.ci is None:
            return True
        return self.ci[0] < 1.0 / (1.0 + MIN_EFFECT) and self.ci[1] > 1.0 + MIN_EFFECT


def compare(before: Sequence[float], after: Sequence[float], *, higher_is_better: bool = False,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Compare two arms' per-process values (times, or rates with ``higher_is_better``)."""
    if higher_is_better:
        ratio, ci = ratio_interval(after, before)
    else:
        ratio, ci = ratio_interval(before, after)
    return Comparison(ratio=ratio, ci=ci, verdict=verdict(ratio, ci, min_effect),
                      spread=(relative_spread(before), relative_spread(after)))
