"""The parent side of bench, driven by a runner that answers known figures: verdicts, the noise
line, and a worker's answer that does not fit (untrusted: it ran user code)."""

from __future__ import annotations

import itertools

import pytest

from graphmend.bench.parent import bench
from graphmend.config import load_config
from graphmend.runner import JobResult
from tests.verify.repo_files import BRANCH, MODEL, WHERE, files


class Scripted:
    """Answers each bench job with the next figures for its arm ("before" or "after")."""

    name = "scripted"

    def __init__(self, before, after):
        self.figures = {"before": itertools.cycle(before), "after": itertools.cycle(after)}
        self.jobs = []

    def run(self, job):
        self.jobs.append(job)
        arm = "before" if "(before)" in job.label else "after"
        data = dict(next(self.figures[arm]))
        return JobResult(ok=True, data=data)


def figures(steady, cold=2.0, eager=0.01):
    return {"cold_start_s": cold, "steady_s": steady, "steady_min_s": steady * 0.9, "eager_steady_s": eager,
            "graph_count": 1, "batch_size": None, "environment": {"torch_version": "2.13.0", "backend": "eager"}}


@pytest.fixture
def changed_repo(make_repo):
    root = make_repo(files())
    (root / "pkg/model.py").write_text(MODEL.replace(BRANCH, WHERE))
    return load_config(root)


def test_a_clear_speedup_is_faster_and_an_unchanged_figure_is_no_change(changed_repo):
    jitter = [1.0, 1.01, 0.99, 1.02, 0.98]
    runner = Scripted([figures(0.002 * j, cold=2.0 * j, eager=0.01 * j) for j in jitter],
                      [figures(0.001 * j, cold=2.0 * k, eager=0.01 * k) for j, k in zip(jitter, jitter[::-1])])
    report = bench(changed_repo, runner=runner, rounds=5, threads=1)
    (target,) = report.targets
    (p,) = target.points
    assert [j.label.rsplit("(", 1)[1] for j in runner.jobs] == ["before)", "after)"] * 5  # interleaved A B A B
    assert p.steady_verdict == "faster" and p.steady_ci[0] > 1.9 and p.steady_ratio == pytest.approx(2.0, rel=0.03)
    assert p.throughput_verdict == "faster" and p.throughput_ci == p.steady_ci
    assert p.cold_start_verdict == "no-change" and p.cold_start_ci[0] <= 1.0 <= p.cold_start_ci[1]
    assert p.eager_verdict == "no-change"
    assert p.noise is None  # 2% spread: every interval is narrow enough to decide
    assert p.before.steady_runs == tuple(0.002 * j for j in jitter)


def test_a_noisy_machine_is_told_what_to_change(changed_repo):
    noisy = [0.7, 1.3, 1.0, 0.8, 1.25]
    runner = Scripted([figures(0.001 * j) for j in noisy], [figures(0.001 * j) for j in reversed(noisy)])
    (target,) = bench(changed_repo, runner=runner, rounds=5, threads=1).targets
    (p,) = target.points
    assert p.steady_verdict == "no-change"
    assert p.noise.startswith("too noisy to decide: steady state 0.")
    assert "could be 5% faster or slower; run-to-run spread up to" in p.noise and "--rounds" in p.noise
    assert "(now 5 rounds, 1 threads, " in p.noise and "load average" in p.noise


def test_a_worker_answer_that_is_not_a_time_fails_the_target_in_one_line(changed_repo):
    bad = figures(0.001)
    bad["steady_s"] = "nan; rm -rf /"
    runner = Scripted([figures(0.001)], [bad])
    (target,) = bench(changed_repo, runner=runner, rounds=1, threads=1).targets
    assert target.error == "after: the worker answered steady_s = 'nan; rm -rf /', not a time in seconds"
    negative = figures(-1.0)
    (target,) = bench(changed_repo, runner=Scripted([negative], [figures(0.001)]), rounds=1, threads=1).targets
    assert target.error.startswith("before: the worker answered steady_s = '-1.0'")
