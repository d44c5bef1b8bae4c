"""What the pull-request review carries from a bench report: each speedup with its interval and
verdict, so the sticky comment can claim speed only where bench decided "faster"."""

from __future__ import annotations

import graphmend.bench
from bot import render
from bot.review import Stage
from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.config import Config, TargetConfig
from graphmend.pr import _bench


def test_pr_bench_carries_interval_and_verdict(monkeypatch, tmp_path):
    arm = ArmTiming(cold_start_s=2.0, steady_s=0.002, steady_min_s=0.002, throughput=500.0)
    fast = BenchPoint(batch_size=None, before=arm, after=arm, cold_start_ratio=1.1, steady_ratio=1.6, throughput_ratio=1.6,
                      cold_start_ci=(0.9, 1.3), cold_start_verdict="no-change", steady_ci=(1.4, 1.8), steady_verdict="faster")
    noisy = BenchPoint(batch_size=None, before=arm, after=arm, cold_start_ratio=1.0, steady_ratio=1.4, throughput_ratio=1.4,
                       steady_ci=(0.7, 2.6), steady_verdict="no-change")
    report = BenchReport(base="HEAD", targets=(TargetBench("fast", (fast,)), TargetBench("noisy", (noisy,))))
    monkeypatch.setattr(graphmend.bench, "bench_fixes", lambda config, fixes, progress=None: report)
    config = Config(root=tmp_path, targets=(TargetConfig(name="fast", entry="m:f"),))
    out, stage, withdrawn = _bench(config, {"fp": object()}, True, {})
    assert stage == Stage("bench", True, "") and withdrawn == {}
    assert (out["fast"].speedup, out["fast"].speedup_ci, out["fast"].verdict) == (1.6, (1.4, 1.8), "faster")
    assert (out["fast"].cold_start_speedup, out["fast"].cold_start_verdict) == (1.1, "no-change")
    assert (out["noisy"].speedup, out["noisy"].verdict) == (1.4, "no-change")
    assert render.is_faster(out["fast"]) and not render.is_faster(out["noisy"])
