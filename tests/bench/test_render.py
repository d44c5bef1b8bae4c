"""Bench renderings: the warnings a reader needs beside the figures."""

from __future__ import annotations

from graphmend.bench.results import BenchReport
from graphmend.report.markdown_verify import render_bench_markdown, render_bench_text


def test_bench_text_warns_when_the_machine_is_busy():
    busy = BenchReport(base="HEAD", threads=2, cpus=2, load_average=5.9, source_changed=True)
    assert ("  ! the machine is busy (load average 5.9 on 2 CPUs): timings will be noisy; stop other work "
            "and use --threads 1 (threads wait on each other when CPUs are taken)") in render_bench_text(busy)
    assert "busy" in render_bench_markdown(busy)
    quiet = BenchReport(base="HEAD", threads=2, cpus=2, load_average=0.4, source_changed=True)
    assert "busy" not in render_bench_text(quiet) + render_bench_markdown(quiet)
