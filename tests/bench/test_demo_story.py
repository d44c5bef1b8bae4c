"""The demo's story: one line per leftover site with no contradiction, the benchmark plan
(the changed target that lost the most graphs, on inductor), the verify plan (the targets that
run through a changed file) and the overall line."""

from __future__ import annotations

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.config import load_config
from graphmend.demo import EXAMPLES, bench_plan, leftover_lines, overall_line, verify_plan
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
                Decline("GM101", "src/x.py", 3, "a return inside the branch"),
                Decline("GM401", "src/tinymodels/moe.py", 25, "Dynamo runs forward() eagerly from here on anyway"),
                Decline("GM501", "src/tinymodels/moe.py", 25, "Dynamo runs forward() eagerly from here on anyway"))
    item = GraphBreak("src/tinymodels/moe.py", 25, "item()", Category.SCALAR)
    lines = leftover_lines(fix_report(remaining=(scalar, scalar, other, item), declined=declined))
    assert lines == [
        f"left     {POOL}:14 scalar, declined:",
        "           GM401: used as a Python number",
        "           GM501: capture_scalar_outputs would not help: feeds range()",
        f"left     {POOL}:14 scalar (declined as above)",
        "left     src/tinymodels/moe.py:75 dynamic-shape (config: torch._dynamo.config.capture_dynamic_output_shape_ops = True)",
        "left     src/tinymodels/moe.py:25 scalar, declined:",
        "           GM401, GM501: Dynamo runs forward() eagerly from here on anyway",  # one reason, said once
        "declined GM101 at src/x.py:3: a return inside the branch",
    ]
    assert not any("capture_scalar_outputs = True" in line for line in lines)


def test_bench_plan_takes_the_changed_target_that_lost_most_graphs_with_inductor():
    config = load_config(EXAMPLES)
    planned, names, line = bench_plan(config, fix_report())
    assert names == ["tiny-decoder"]  # 5 -> 1 graphs; tiny-mlp did not change
    backends = {t.name: t.backend for t in planned.targets}
    assert backends["tiny-decoder"] == "inductor"
    assert backends["tiny-encoder"] == backends["tiny-moe"] == "eager"
    assert line == ("tiny-decoder (inductor: it lost the most graphs); also changed, not measured here: tiny-encoder, "
                    "tiny-moe (`graphmend bench --target NAME`); unchanged by the fixes: tiny-mlp")
    assert {t.backend for t in config.targets} == {"eager"}  # the configuration itself is left alone
    _, names, line = bench_plan(config, FixReport(mode="dynamic", verified=True, targets=(TargetSummary("tiny-mlp", 0, 0, 1, 1),)))
    assert names == [] and line == "no target changed: nothing to benchmark"


def test_verify_plan_takes_the_targets_that_ran_through_a_changed_file():
    from graphmend.fix import FileChange
    from graphmend.model import CheckReport, TargetResult

    checked = CheckReport(targets=(TargetResult("tiny-encoder", traced_files=("src/tinymodels/encoder.py", "tools/t.py")),
                                   TargetResult("tiny-mlp", traced_files=("src/tinymodels/mlp.py", "tools/t.py")),
                                   TargetResult("tiny-moe", traced_files=("src/tinymodels/moe.py",))))
    changes = (FileChange("src/tinymodels/encoder.py", "diff"),)
    assert verify_plan(checked, fix_report(changes=changes)) == (
        ["tiny-encoder"], "(only the targets that run a changed file are verified; tiny-mlp, tiny-moe run none)")
    both = changes + (FileChange("src/tinymodels/moe.py", "diff"), FileChange("src/tinymodels/mlp.py", "diff"))
    assert verify_plan(checked, fix_report(changes=both)) == (["tiny-encoder", "tiny-mlp", "tiny-moe"], "")


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
    assert line == ("overall: breaks 9 -> 2; graphs 14 -> 8; every target the fixes reach equivalent (1 of 4); "
                    "cold start 1.06× geometric mean (1 faster, 2 no-change); "
                    "steady state 1.00× geometric mean (1 faster, 1 slower, 1 no-change)")
    assert overall_line(fix_report(), verified, None) == ("overall: breaks 9 -> 2; graphs 14 -> 8; "
                                                          "every target the fixes reach equivalent (1 of 4)")
    everything = VerifyReport(base="HEAD", targets=tuple(TargetVerification(t.name, ok=True) for t in fix_report().targets))
    assert overall_line(fix_report(), everything, None) == "overall: breaks 9 -> 2; graphs 14 -> 8; every target equivalent"
