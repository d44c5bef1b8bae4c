"""The parent side of ``bench``: fresh processes per arm, interleaved, ratios before/after.

For each target and batch size, ``rounds`` rounds each run the "before" tree (at ``base``)
and then the "after" tree (the working tree) in fresh worker processes — A B A B — so that a
machine that gets slower or faster during the run affects both arms alike. Each run reports
its cold start (first call, compilation included, with an empty private inductor cache), its
compiled steady state and, uncompiled, its eager steady state (the reference of what
compiling buys). Each ratio comes with a confidence interval and a verdict computed over the
per-process figures (``graphmend.bench.stats``); a line says when the machine is too noisy to
decide and what to change.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench
from graphmend.bench.stats import CONFIDENCE, DEFAULT_ROUNDS, MIN_EFFECT, MIN_ROUNDS, Comparison, compare
from graphmend.config import Config, TargetConfig, load_config
from graphmend.model import Environment, Fix
from graphmend.runner import Job, Runner, get_runner
from graphmend.runner.channel import work_folder
from graphmend.trees import apply_fixes_to_tree, changed_files, copy_tree, tree_at
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
    return available_cpus()


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def load_average() -> Optional[float]:
    """The one-minute load average (``None`` where the system has none), reported beside figures."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den <= 0:
        return None
    return num / den


# A worker's answer is untrusted (user code ran in that process): every figure is checked
# before it is used, and an answer that does not fit fails the arm with one line.
_TIMES = ("cold_start_s", "steady_s", "steady_min_s")
_MAX_SECONDS = 1e6


def _seconds(data: dict[str, Any], key: str, optional: bool = False) -> Optional[float]:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < _MAX_SECONDS) or math.isnan(value):
        raise _ArmFailed(f"the worker answered {key} = {str(value)[:40]!r}, not a time in seconds")
    return float(value)


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    """The figures of one worker run, validated."""
    out: dict[str, Any] = {key: _seconds(data, key) for key in _TIMES}
    out["eager_steady_s"] = _seconds(data, "eager_steady_s", optional=True)
    graphs = data.get("graph_count", 0)
    if isinstance(graphs, bool) or not isinstance(graphs, int) or not 0 <= graphs < 1_000_000:
        raise _ArmFailed(f"the worker answered graph_count = {str(graphs)[:40]!r}")
    out["graph_count"] = graphs
    size = data.get("batch_size")
    out["batch_size"] = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
    syncs = data.get("cuda_syncs_per_call")
    out["cuda_syncs_per_call"] = float(syncs) if isinstance(syncs, (int, float)) and not isinstance(syncs, bool) and syncs >= 0 else None
    env = data.get("environment")
    out["environment"] = {k: v[:200] for k, v in env.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(env, dict) else {}
    return out


class _Measure:
    def __init__(self, config: Config, target: TargetConfig, runner: Runner, work: Path, threads: int, progress: Progress):
        self.config, self.target, self.runner, self.work, self.threads, self.progress = config, target, runner, work, threads, progress
        self.count = 0

    def run(self, root: Path, label: str, batch_size: Optional[int], eager: bool, step: str) -> dict[str, Any]:
        self.count += 1
        scratch = self.work / f"{self.count:03d}-{label}"
        scratch.mkdir(parents=True)
        payload = {
            "target": dataclasses.asdict(self.target),
            "compile": True,
            "eager": eager,
            "warmup": self.config.bench.warmup,
            "repeat": self.config.bench.repeat,
            "batch_size": batch_size,
            "threads": self.threads,
        }
        _say(self.progress, f"bench: {self.target.name}: {step} {label}{'' if batch_size is None else f' (batch {batch_size})'}")
        job = Job(task="bench", payload=payload, root=root, timeout_s=self.config.timeout_for(self.target), scratch=scratch,
                  env={"OMP_NUM_THREADS": str(self.threads)}, device=job_device(self.target),
                  label=f"target {self.target.name} ({label})")
        result = self.runner.run(job)
        if not result.ok:
            raise _ArmFailed(f"{label}: {result.error}")
        try:
            return _checked(result.data or {})
        except _ArmFailed as exc:
            raise _ArmFailed(f"{label}: {exc}") from None


class _ArmFailed(Exception):
    pass


def _aggregate(runs: list[dict[str, Any]]) -> ArmTiming:
    syncs = [r["cuda_syncs_per_call"] for r in runs if r.get("cuda_syncs_per_call") is not None]
    eager = [r["eager_steady_s"] for r in runs if r.get("eager_steady_s") is not None]
    steady = statistics.median(r["steady_s"] for r in runs)
    items = runs[0].get("batch_size") or 1
    return ArmTiming(
        cold_start_s=statistics.median(r["cold_start_s"] for r in runs),
        steady_s=steady,
        steady_min_s=min(r["steady_min_s"] for r in runs),
        # From the aggregated steady state, not a median of per-run rates: with two noisy runs
        # the mean of 1/x is dominated by the faster run and disagrees with the steady ratio.
        throughput=items / steady if steady > 0 else None,
        eager_steady_s=statistics.median(eager) if len(eager) == len(runs) else None,
        graph_count=max(r.get("graph_count", 0) for r in runs),
        cuda_syncs_per_call=statistics.median(syncs) if syncs else None,
        runs=len(runs),
        cold_start_runs=tuple(r["cold_start_s"] for r in runs),
        steady_runs=tuple(r["steady_s"] for r in runs),
        eager_runs=tuple(eager) if len(eager) == len(runs) else (),
    )


METRICS = ("cold start", "steady state", "eager")


def _point(size: Optional[int], b: ArmTiming, a: ArmTiming, min_effect: float, setting: str = "") -> BenchPoint:
    """Ratios with intervals and verdicts from the two arms' per-process figures."""
    cold = compare(b.cold_start_runs, a.cold_start_runs, min_effect=min_effect)
    steady = compare(b.steady_runs, a.steady_runs, min_effect=min_effect)
    eager = compare(b.eager_runs, a.eager_runs, min_effect=min_effect) if b.eager_runs and a.eager_runs else None
    return BenchPoint(
        batch_size=size, before=b, after=a,
        cold_start_ratio=cold.ratio, cold_start_ci=cold.ci, cold_start_verdict=cold.verdict,
        steady_ratio=steady.ratio, steady_ci=steady.ci, steady_verdict=steady.verdict,
        # Throughput is items over steady state in each process, so its ratio (after / before)
        # and interval are exactly the steady state's.
        throughput_ratio=steady.ratio if a.throughput is not None else None,
        throughput_ci=steady.ci if a.throughput is not None else None,
        throughput_verdict=steady.verdict if a.throughput is not None else None,
        eager_ratio=eager.ratio if eager else None, eager_ci=eager.ci if eager else None,
        eager_verdict=eager.verdict if eager else None,
        eager_speedup_after=_ratio(a.eager_steady_s, a.steady_s),
        noise=_noise(dict(zip(METRICS, (cold, steady, eager))), b.runs, min_effect, setting),
    )


def _noise(comparisons: dict[str, Optional[Comparison]], rounds: int, min_effect: float, setting: str = "") -> Optional[str]:
    """One line when a figure cannot be decided, saying what to change; ``None`` otherwise."""
    if rounds < MIN_ROUNDS:
        return (f"{rounds} round{'s' if rounds != 1 else ''} per arm cannot give a {CONFIDENCE:.0%} interval: "
                f"use --rounds {MIN_ROUNDS} or more; every verdict is no-change until then")
    wide = {name: c for name, c in comparisons.items() if c is not None and c.undecided}
    if not wide:
        return None
    spreads = [s for c in wide.values() for s in c.spread if s is not None]
    spread = f"; run-to-run spread up to {max(spreads):.0%}" if spreads else ""
    which = ", ".join(f"{name} {c.ci[0]:.2f}–{c.ci[1]:.2f}×" for name, c in wide.items() if c.ci)
    return (f"too noisy to decide: {which} could be {min_effect:.0%} faster or slower{spread}. "
            f"Use more --rounds, fewer --threads than the machine's cores, and stop other work on the machine"
            + (f" ({setting})" if setting else ""))


def _bench_target(config: Config, target: TargetConfig, before_root: Path, after_root: Path, runner: Runner, work: Path,
                  rounds: int, threads: int, eager: bool, min_effect: float, progress: Progress) -> TargetBench:
    measure = _Measure(config, target, runner, work, threads, progress)
    sizes: list[Optional[int]] = list(config.bench.batch_sizes) if target.batch_arg else [None]
    points: list[BenchPoint] = []
    env: dict[str, Any] = {}
    try:
        for size in sizes:
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for n in range(rounds):
                for label, root in (("before", before_root), ("after", after_root)):
                    runs[label].append(measure.run(root, label, size, eager, f"round {n + 1}/{rounds}"))
            env = runs["after"][0].get("environment") or env
            load = load_average()
            setting = (f"now {rounds} rounds, {threads} threads, {available_cpus()} CPUs available"
                       + ("" if load is None else f", load average {load:g}"))
            points.append(_point(size, _aggregate(runs["before"]), _aggregate(runs["after"]), min_effect, setting))
    except _ArmFailed as exc:
        return TargetBench(name=target.name, points=tuple(points), error=str(exc), environment=_env(env, target))
    return TargetBench(name=target.name, points=tuple(points), environment=_env(env, target))


def _env(env: dict[str, Any], target: TargetConfig) -> Environment:
    return Environment(torch_version=env.get("torch_version", ""), device=env.get("device", target.device),
                       dtype=env.get("dtype", target.dtype), backend=env.get("backend", target.backend),
                       mode=env.get("mode", target.mode), python_version=env.get("python_version", ""))


def bench(config: Config, target_names: Optional[Iterable[str]] = None, *, base: str = "HEAD", runner: Optional[Runner] = None,
          progress: Progress = None, rounds: int = DEFAULT_ROUNDS, threads: Optional[int] = None, eager: bool = True,
          min_effect: float = MIN_EFFECT, aa: bool = False) -> BenchReport:
    """Measure the tree at ``base`` ("before") against the working tree ("after").

    The trees' source files are compared first: when nothing differs there is nothing a fix
    could have changed, and the report says so without measuring, unless ``aa`` asks for the
    measurement anyway (an A/A check of the machine's noise: every verdict should be no-change).
    """
    targets = select_targets(config, target_names)
    runner = runner or get_runner(config)
    threads = threads or default_threads()
    results = []
    settings = dict(base=base, warmup=config.bench.warmup, repeat=config.bench.repeat, rounds=rounds, threads=threads,
                    confidence=CONFIDENCE, min_effect=min_effect, cpus=available_cpus())
    with tree_at(config.root, base) as before_root:
        changed = bool(changed_files(before_root, config.root))
        if not changed and not aa:
            _say(progress, f"bench: no source change between {base} and the working tree: nothing measured")
            return BenchReport(**settings, source_changed=False, load_average=load_average())
        with work_folder("graphmend-bench-") as work:
            load = load_average()
            for target in targets:
                results.append(_bench_target(config, target, before_root, config.root, runner, Path(work) / target.name,
                                             rounds, threads, eager, min_effect, progress))
    return BenchReport(**settings, targets=tuple(results), source_changed=changed, load_average=load,
                       load_average_after=load_average())


def bench_fixes(config: Config, fixes: Sequence[Fix], *, progress: Progress = None, rounds: int = DEFAULT_ROUNDS) -> BenchReport:
    """Measure the working tree ("before") against it with ``fixes`` applied ("after").

    Both run from a private copy: ``bench`` compares a revision with the working tree, so the
    copy is committed as it is, then fixed. Raises what ``bench`` and the edits raise.
    """
    with work_folder("graphmend-bench-fixes-") as work:
        tree = copy_tree(config.root, Path(work) / "tree")
        env = dict(os.environ, GIT_AUTHOR_NAME="graphmend", GIT_AUTHOR_EMAIL="graphmend@localhost",
                   GIT_COMMITTER_NAME="graphmend", GIT_COMMITTER_EMAIL="graphmend@localhost")
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "before the fixes", "--no-verify"]):
            subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True)
        apply_fixes_to_tree(tree, fixes)
        fixed = load_config(tree, tree / config.file.relative_to(config.root)) if config.file else load_config(tree)
        return bench(fixed, base="HEAD", progress=progress, rounds=rounds)
