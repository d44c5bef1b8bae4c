"""``bench``: cold start, steady state and throughput, before vs after a fix.

``bench(config, target_names=None, *, base="HEAD", runner=None, progress=None)`` returns a
``BenchReport`` (``graphmend.bench.results``); torch is imported only by the workers.
``bench_fixes(config, fixes, *, progress=None)`` measures the working tree against it with
``fixes`` applied, on a private copy.
"""

from __future__ import annotations

from typing import Any

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench

__all__ = ["ArmTiming", "BenchPoint", "BenchReport", "TargetBench", "bench", "bench_fixes"]


def bench(*args: Any, **kwargs: Any) -> BenchReport:
    """Measure the tree at ``base`` against the working tree; see graphmend.bench.parent.bench."""
    from graphmend.bench.parent import bench as run

    return run(*args, **kwargs)


def bench_fixes(*args: Any, **kwargs: Any) -> BenchReport:
    """Measure the working tree against it with fixes applied; see graphmend.bench.parent.bench_fixes."""
    from graphmend.bench.parent import bench_fixes as run

    return run(*args, **kwargs)
