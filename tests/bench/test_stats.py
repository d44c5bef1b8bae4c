"""The statistics of bench: intervals that cover, verdicts that follow them."""

from __future__ import annotations

import math
import random

import pytest

from graphmend.bench.stats import MIN_ROUNDS, compare, ratio_interval, relative_spread, verdict


def test_exact_null_distribution_sets_how_many_processes_an_interval_needs():
    # 99% (the default): with n = m = 4 the most extreme ordering has probability 2/70 (two-sided).
    assert MIN_ROUNDS == 5
    before, after = [2.0, 2.2, 2.4, 2.6], [1.0, 1.1, 1.2, 1.3]
    assert ratio_interval(before, after)[1] is None
    # At 95%, 4 per arm suffice and the interval spans every pairwise ratio (P(U = 0) = 1/70 per tail);
    # with 3 per arm even 95% is out of reach (2/20 = 0.1).
    assert ratio_interval(before, after, confidence=0.95)[1] == pytest.approx((2.0 / 1.3, 2.6 / 1.0))
    assert ratio_interval([1.0, 1.1, 1.2], [1.0, 1.1, 1.2], confidence=0.95)[1] is None
    # 6 per arm at 99%: P(U <= 2) = 4/924 per tail, so the 3rd smallest and 3rd largest of 36 ratios.
    six_before, six_after = [2.0 + i / 10 for i in range(6)], [1.0 + i / 10 for i in range(6)]
    shifts = sorted(b / a for b in six_before for a in six_after)
    assert ratio_interval(six_before, six_after)[1] == pytest.approx((shifts[2], shifts[-3]))


def test_one_value_per_arm_is_the_plain_ratio():
    assert ratio_interval([3.0], [2.0]) == (pytest.approx(1.5), None)


def test_known_faster_slower_and_no_change_samples():
    rng = random.Random(1)
    base = [1.0 + rng.gauss(0, 0.02) for _ in range(6)]
    same = [1.0 + rng.gauss(0, 0.02) for _ in range(6)]
    half = [0.5 * (1.0 + rng.gauss(0, 0.02)) for _ in range(6)]
    assert compare(base, half).verdict == "faster"  # times halve: 2× faster
    assert compare(half, base).verdict == "slower"
    assert compare(base, same).verdict == "no-change"
    # Throughput: higher is better, so the ratio is after / before.
    assert compare([100.0] * 3 + [101.0, 99.0], [200.0, 201.0, 199.0, 198.0, 202.0], higher_is_better=True).verdict == "faster"


def test_a_significant_but_small_effect_is_no_change():
    before = [1.03, 1.031, 1.032, 1.033, 1.034]
    after = [1.0, 1.001, 1.002, 1.003, 1.004]
    c = compare(before, after)
    assert c.ci[0] > 1.0  # the interval excludes 1 ...
    assert c.verdict == "no-change"  # ... but 3% is below the 5% minimum
    assert compare(before, after, min_effect=0.01).verdict == "faster"


def test_verdict_follows_the_interval():
    assert verdict(1.3, (1.1, 1.5)) == "faster"
    assert verdict(1.3, (0.9, 1.5)) == "no-change"  # crosses 1
    assert verdict(0.7, (0.6, 0.8)) == "slower"
    assert verdict(1.3, None) == "no-change"


@pytest.mark.parametrize("confidence,n,least,most", [(0.95, 5, 0.93, 0.995), (0.99, 6, 0.975, 1.0)])
def test_interval_covers_the_true_ratio_on_synthetic_data(confidence, n, least, most):
    # Log-normal times, after = before / 1.25: the interval must cover 1.25 in about
    # ``confidence`` of repetitions (it is exact for a pure shift of the logs).
    rng = random.Random(7)
    true_ratio, trials, covered = 1.25, 400, 0
    for _ in range(trials):
        before = [math.exp(rng.gauss(0.0, 0.1)) for _ in range(n)]
        after = [math.exp(rng.gauss(0.0, 0.1)) / true_ratio for _ in range(n)]
        ratio, (low, high) = ratio_interval(before, after, confidence=confidence)
        assert low <= ratio <= high
        covered += low <= true_ratio <= high
    assert least <= covered / trials <= most, covered


def test_identical_distributions_are_rarely_called_a_change():
    # The A/A check: same distribution in both arms; a verdict other than no-change should be
    # rarer than the 1% the interval allows (the 5% minimum effect makes it rarer still).
    rng = random.Random(3)
    calls = [compare([rng.lognormvariate(0, 0.05) for _ in range(6)], [rng.lognormvariate(0, 0.05) for _ in range(6)]).verdict
             for _ in range(300)]
    assert calls.count("no-change") / len(calls) >= 0.99


def test_noisy_arms_are_undecided_and_quiet_ones_are_not():
    noisy = compare([1.0, 1.3, 0.8, 1.1, 0.9], [1.0, 0.85, 1.25, 1.05, 0.95])
    assert noisy.verdict == "no-change" and noisy.undecided
    quiet = compare([1.0, 1.001, 0.999, 1.002, 0.998], [1.0, 1.001, 0.999, 1.002, 0.998])
    assert quiet.verdict == "no-change" and not quiet.undecided
    assert relative_spread([1.0]) is None
    assert relative_spread([1.0, 1.1, 0.9]) == pytest.approx(1.4826 * 0.1)


def test_bad_times_are_refused():
    with pytest.raises(ValueError):
        ratio_interval([1.0, 0.0], [1.0])
    with pytest.raises(ValueError):
        ratio_interval([], [1.0])
