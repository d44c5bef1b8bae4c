"""Markdown/text renderings and the chart, from hand-made report values."""

from __future__ import annotations

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.model import Environment, from_dict, to_dict
from graphmend.report.chart import write_chart
from graphmend.report.markdown_verify import render_bench_markdown, render_verify_markdown, render_verify_text
from graphmend.schemas import validate
from graphmend.verify.results import FixVerdict, Mismatch, TargetVerification, VerifyReport

ENV = Environment(torch_version="2.13.0", device="cpu", dtype="float32", backend="eager")


def verify_report() -> VerifyReport:
    good = TargetVerification(name="tiny", ok=True, cases=3, graphs_before=3, graphs_after=1, breaks_before=2, breaks_after=0,
                              environment=ENV)
    bad = TargetVerification(name="other|x", ok=False, cases=2, graphs_before=2, graphs_after=1, breaks_before=1, breaks_after=0,
                             mismatches=(Mismatch("stdout", "compiled", "inputs[0]", "printed 'a' instead of 'b'"),), environment=ENV)
    fixes = (FixVerdict("f1", "GM101", "pkg/m.py", 12, ok=True, alone=True, together=True),
             FixVerdict("f2", "GM201", "pkg/m.py", 30, ok=False, alone=False, reason="stdout differs"))
    return VerifyReport(base="HEAD", targets=(good, bad), fixes=fixes)


def test_verify_report_round_trips_validates_and_renders():
    report = verify_report()
    data = to_dict(report)
    validate("verify", data)
    assert from_dict(VerifyReport, data) == report
    md = render_verify_markdown(report)
    assert "| `tiny` | equivalent | 3 → 1 | 2 → 0 | 3 |" in md
    assert "`other\\|x`" in md  # a pipe in a name does not break the table
    assert "withdrawn: stdout differs" in md
    text = render_verify_text(report)
    assert "verification FAILED" in text and "WITHDRAWN" in text


def test_bench_markdown_and_chart(tmp_path):
    before = ArmTiming(cold_start_s=2.0, steady_s=0.004, steady_min_s=0.003, throughput=250.0, eager_steady_s=0.005, graph_count=3, runs=2)
    after = ArmTiming(cold_start_s=0.5, steady_s=0.002, steady_min_s=0.002, throughput=500.0, eager_steady_s=0.005, graph_count=1, runs=2)
    point = BenchPoint(batch_size=4, before=before, after=after, cold_start_ratio=4.0, steady_ratio=2.0, throughput_ratio=2.0,
                       cold_start_ci=(3.5, 4.5), cold_start_verdict="faster", steady_ci=(0.9, 3.0), steady_verdict="no-change",
                       throughput_ci=(0.9, 3.0), throughput_verdict="no-change")
    report = BenchReport(base="HEAD", targets=(TargetBench("tiny", (point,), environment=ENV),))
    validate("bench", to_dict(report))
    assert from_dict(BenchReport, to_dict(report)) == report
    md = render_bench_markdown(report)
    assert ("| `tiny` | 4 | 3 → 1 | 2 s → 500 ms | 4.00× [3.50–4.50] **faster** | 4 ms → 2 ms | 2.00× [0.90–3.00] no-change "
            "| 2.00× [0.90–3.00] no-change |") in md
    png = write_chart(tmp_path / "c.png", verify_report=verify_report(), bench_report=report)
    assert png.read_bytes()[:4] == b"\x89PNG"
