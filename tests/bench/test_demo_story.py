"""The demo's story: one line per leftover site with no contradiction, the benchmark plan
(changed targets only, inductor on the one that lost the most graphs), and the overall line."""

from __future__ import annotations

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.config import load_config
from graphmend.demo import EXAMPLES, bench_plan, leftover_lines, overall_line
from graphmend.fix import FixReport, TargetSummary
from graphmend.model import Category, Decline, GraphBreak, Lever
from graphmend.verify.results import TargetVerification, VerifyReport

POOL = "src/tinymodels/pooling.py"


def fix_report(**kw):
    targets = (TargetSummary("tiny-encoder", 3, 0, 3, 1), TargetSummary("tiny-decoder", 3, 0, 5, 1),
               TargetSummary("tiny-mlp", 0, 0, 1, 1), TargetSummary("tiny-moe", 3, 2, 5, 5))
    return FixReport(mode="dynamic", verified=True, targets=targets, **kw)


def test_a_declined_site_shows_the_declines_not_the_lever_they_refute():
    scalar = GraphBreak(POOL, 14, "item()", Category.SCALAR, lever=Lever.CONFIG,
                        lever_reason="torch._dynamo.config.capture_scalar_outputs = True")
    other = GraphBreak("src/tinymodels/moe.py", 75, "nonzero", Category.DYNAMIC_SHAPE, lever=Lever.CONFIG,
                       lever_reason="torch._dynamo.config.capture_dynamic_output_shape_ops = True")
    declined = (Decline("GM401", POOL, 14, "used as a Python number"),
                Decline("GM501", POOL, 14, "capture_scalar_outputs would not help: feeds range()"),
                Decline("GM101", "src/x.py", 3, "a return inside the branch"))
    lines = leftover_lines(fix_report(remaining=(scalar, scalar, other), declined=declined))
    assert lines == [
        f"left     {POOL}:14 scalar, declined:",
        "           GM401: used as a Python number",
        "           GM501: capture_scalar_outputs would not help: feeds range()",
        f"left     {POOL}:14 scalar (declined as above)",
        "left     src/tinymodels/moe.py:75 dynamic-shape (config: torch._dynamo.config.capture_dynamic_output_shape_ops = True)",
        "declined GM101 at src/x.py:3: a return inside the branch",
    ]
    assert not any("capture_scalar_outputs = True" in line for line in lines)


def test_bench_plan_takes_changed_targets_and_puts_inductor_on_the_one_that_lost_most_graphs():
    config = load_config(EXAMPLES)
    planned, names, line = bench_plan(config, fix_report())
    assert names == ["tiny-decoder", "tiny-encoder", "tiny-moe"]  # tiny-mlp did not change
    backends = {t.name: t.backend for t in planned.targets}
    assert backends["tiny-decoder"] == "inductor"  # 5 -> 1 graphs
    assert backends["tiny-encoder"] == backends["tiny-moe"] == "eager"
    assert line == ("tiny-encoder (eager), tiny-decoder (inductor), tiny-moe (eager); "
                    "unchanged by the fixes, not benchmarked: tiny-mlp")
    assert {t.backend for t in config.targets} == {"eager"}  # the configuration itself is left alone
    _, names, line = bench_plan(config, FixReport(mode="dynamic", verified=True, targets=(TargetSummary("tiny-mlp", 0, 0, 1, 1),)))
    assert names == [] and line == "no target changed: nothing to benchmark"


def point(steady_ratio, verdict, cold_ratio=1.0, cold_verdict="no-change"):
    arm = ArmTiming(cold_start_s=1.0, steady_s=0.001, steady_min_s=0.001, throughput=1000.0)
    return BenchPoint(batch_size=None, before=arm, after=arm, cold_start_ratio=cold_ratio, steady_ratio=steady_ratio,
                      throughput_ratio=steady_ratio, cold_start_verdict=cold_verdict, steady_verdict=verdict,
                      steady_ci=(steady_ratio * 0.9, steady_ratio * 1.1), cold_start_ci=(cold_ratio * 0.9, cold_ratio * 1.1))


def test_overall_line_sums_counts_and_gives_ratios_with_their_verdicts():
    verified = VerifyReport(base="HEAD", targets=(TargetVerification("tiny-decoder", ok=True),))
    bench = BenchReport(base="HEAD", targets=(TargetBench("a", (point(2.0, "faster", 1.2, "faster"),)),
                                             TargetBench("b", (point(0.5, "slower"),)), TargetBench("c", (point(1.0, "no-change"),))))
    line = overall_line(fix_report(), verified, bench)
    assert line == ("overall: breaks 9 -> 2; graphs 14 -> 8; every target equivalent; "
                    "cold start 1.06× geometric mean (1 faster, 2 no-change); "
                    "steady state 1.00× geometric mean (1 faster, 1 slower, 1 no-change)")
    assert overall_line(fix_report(), verified, None) == "overall: breaks 9 -> 2; graphs 14 -> 8; every target equivalent"
