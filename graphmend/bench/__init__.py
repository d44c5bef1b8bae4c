"""``bench``: cold start, steady state and throughput, before vs after a fix.

``bench(config, target_names=None, *, base="HEAD", runner=None, progress=None)`` returns a
``BenchReport`` (``graphmend.bench.results``); torch is imported only by the workers.
"""

from __future__ import annotations

from typing import Any

from graphmend.bench.results import ArmTiming, BenchPoint, BenchReport, TargetBench

__all__ = ["ArmTiming", "BenchPoint", "BenchReport", "TargetBench", "bench"]


def bench(*args: Any, **kwargs: Any) -> BenchReport:
    """Measure the tree at ``base`` against the working tree; see graphmend.bench.parent.bench."""
    from graphmend.bench.parent import bench as run

    return run(*args, **kwargs)
