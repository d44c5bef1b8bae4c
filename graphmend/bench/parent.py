"""The parent side of ``bench``: fresh processes per arm, interleaved, ratios before/after.

For each target and batch size, ``rounds`` rounds each run the "before" tree (at ``base``)
and then the "after" tree (the working tree) in fresh worker processes — A B A B — so that a
machine that gets slower or faster during the run affects both arms alike. Each compiled run
reports its cold start (first call, compilation included, with an empty private inductor
cache) and its steady state; an eager run of each tree is the reference of what compiling
buys. Ratios are taken between medians of the same run.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.config import Config, TargetConfig, load_config
from graphmend.model import Environment, Fix
from graphmend.runner import Job, Runner, get_runner
from graphmend.trees import apply_edits_to_tree, copy_tree, tree_at
from graphmend.verify.parent import job_device, select_targets

Progress = Optional[Callable[[str], None]]


def _say(progress: Progress, message: str) -> None:
    if progress is not None:
        progress(message)


def default_threads() -> int:
    """Pinned thread count: the configured OMP_NUM_THREADS, else the CPUs we may use."""
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den <= 0:
        return None
    return num / den


class _Measure:
    def __init__(self, config: Config, target: TargetConfig, runner: Runner, work: Path, threads: int, progress: Progress):
        self.config, self.target, self.runner, self.work, self.threads, self.progress = config, target, runner, work, threads, progress
        self.count = 0

    def run(self, root: Path, label: str, batch_size: Optional[int], compile_: bool) -> dict[str, Any]:
        self.count += 1
        scratch = self.work / f"{self.count:03d}-{label}"
        scratch.mkdir(parents=True)
        payload = {
            "target": dataclasses.asdict(self.target),
            "compile": compile_,
            "warmup": self.config.bench.warmup,
            "repeat": self.config.bench.repeat,
            "batch_size": batch_size,
            "threads": self.threads,
        }
        what = "compiled" if compile_ else "eager"
        _say(self.progress, f"bench: {self.target.name}: {label} ({what}{'' if batch_size is None else f', batch {batch_size}'})")
        job = Job(task="bench", payload=payload, root=root, timeout_s=self.config.sandbox.timeout_s, scratch=scratch,
                  env={"OMP_NUM_THREADS": str(self.threads)}, device=job_device(self.target),
                  label=f"target {self.target.name} ({label})")
        result = self.runner.run(job)
        if not result.ok:
            raise _ArmFailed(f"{label}: {result.error}")
        return result.data or {}


class _ArmFailed(Exception):
    pass


def _aggregate(runs: list[dict[str, Any]], eager: Optional[dict[str, Any]]) -> ArmTiming:
    syncs = [r["cuda_syncs_per_call"] for r in runs if r.get("cuda_syncs_per_call") is not None]
    steady = statistics.median(r["steady_s"] for r in runs)
    items = runs[0].get("batch_size") or 1
    return ArmTiming(
        cold_start_s=statistics.median(r["cold_start_s"] for r in runs),
        steady_s=steady,
        steady_min_s=min(r["steady_min_s"] for r in runs),
        # From the aggregated steady state, not a median of per-run rates: with two noisy runs
        # the mean of 1/x is dominated by the faster run and disagrees with the steady ratio.
        throughput=items / steady if steady > 0 else None,
        eager_steady_s=eager["steady_s"] if eager else None,
        graph_count=max(r.get("graph_count", 0) for r in runs),
        cuda_syncs_per_call=statistics.median(syncs) if syncs else None,
        runs=len(runs),
    )


def _bench_target(config: Config, target: TargetConfig, before_root: Path, after_root: Path, runner: Runner, work: Path,
                  rounds: int, threads: int, eager: bool, progress: Progress) -> TargetBench:
    measure = _Measure(config, target, runner, work, threads, progress)
    sizes: list[Optional[int]] = list(config.bench.batch_sizes) if target.batch_arg else [None]
    points: list[BenchPoint] = []
    env: dict[str, Any] = {}
    try:
        for size in sizes:
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for _ in range(rounds):
                for label, root in (("before", before_root), ("after", after_root)):
                    runs[label].append(measure.run(root, label, size, True))
            eager_runs = {label: (measure.run(root, label, size, False) if eager else None)
                          for label, root in (("before", before_root), ("after", after_root))}
            env = runs["after"][0].get("environment") or env
            b = _aggregate(runs["before"], eager_runs["before"])
            a = _aggregate(runs["after"], eager_runs["after"])
            points.append(BenchPoint(
                batch_size=size, before=b, after=a,
                cold_start_ratio=_ratio(b.cold_start_s, a.cold_start_s) or 0.0,
                steady_ratio=_ratio(b.steady_s, a.steady_s) or 0.0,
                throughput_ratio=_ratio(a.throughput, b.throughput),
                eager_speedup_after=_ratio(a.eager_steady_s, a.steady_s),
            ))
    except _ArmFailed as exc:
        return TargetBench(name=target.name, points=tuple(points), error=str(exc), environment=_env(env, target))
    return TargetBench(name=target.name, points=tuple(points), environment=_env(env, target))


def _env(env: dict[str, Any], target: TargetConfig) -> Environment:
    return Environment(torch_version=env.get("torch_version", ""), device=env.get("device", target.device),
                       dtype=env.get("dtype", target.dtype), backend=env.get("backend", target.backend),
                       mode=env.get("mode", target.mode), python_version=env.get("python_version", ""))


def bench(config: Config, target_names: Optional[Iterable[str]] = None, *, base: str = "HEAD", runner: Optional[Runner] = None,
          progress: Progress = None, rounds: int = 2, threads: Optional[int] = None, eager: bool = True) -> BenchReport:
    """Measure the tree at ``base`` ("before") against the working tree ("after")."""
    targets = select_targets(config, target_names)
    runner = runner or get_runner(config)
    threads = threads or default_threads()
    results = []
    with tree_at(config.root, base) as before_root, tempfile.TemporaryDirectory(prefix="graphmend-bench-") as work:
        for target in targets:
            results.append(_bench_target(config, target, before_root, config.root, runner, Path(work) / target.name,
                                         rounds, threads, eager, progress))
    return BenchReport(base=base, targets=tuple(results), warmup=config.bench.warmup, repeat=config.bench.repeat,
                       rounds=rounds, threads=threads)


def bench_fixes(config: Config, fixes: Sequence[Fix], *, progress: Progress = None) -> BenchReport:
    """Measure the working tree ("before") against it with ``fixes`` applied ("after").

    Both run from a private copy: ``bench`` compares a revision with the working tree, so the
    copy is committed as it is, then fixed. Raises what ``bench`` and the edits raise.
    """
    with tempfile.TemporaryDirectory(prefix="graphmend-bench-fixes-") as work:
        tree = copy_tree(config.root, Path(work) / "tree")
        env = dict(os.environ, GIT_AUTHOR_NAME="graphmend", GIT_AUTHOR_EMAIL="graphmend@localhost",
                   GIT_COMMITTER_NAME="graphmend", GIT_COMMITTER_EMAIL="graphmend@localhost")
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "before the fixes", "--no-verify"]):
            subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True)
        apply_edits_to_tree(tree, [e for fx in fixes for e in fx.edits])
        fixed = load_config(tree, tree / config.file.relative_to(config.root)) if config.file else load_config(tree)
        return bench(fixed, base="HEAD", progress=progress)
