"""Aggregating an arm's runs: throughput follows the aggregated steady state."""

from graphmend.bench.parent import _aggregate


def run(steady, batch=4):
    return {"cold_start_s": 1.0, "steady_s": steady, "steady_min_s": steady, "throughput": (batch or 1) / steady,
            "batch_size": batch, "graph_count": 1, "eager_steady_s": None}


def test_throughput_is_items_over_the_median_steady_state_not_a_mean_of_rates():
    # Two noisy runs: a median of per-run rates would be (4/0.001 + 4/0.2) / 2 ≈ 2010 items/s,
    # which no steady-state figure of this arm supports.
    arm = _aggregate([run(0.001), run(0.2)])
    assert arm.steady_s == (0.001 + 0.2) / 2
    assert arm.throughput == 4 / arm.steady_s


def test_without_a_batch_size_one_call_is_one_item():
    arm = _aggregate([run(0.5, batch=None)])
    assert arm.throughput == 2.0
