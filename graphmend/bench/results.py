"""The values ``bench`` returns: frozen dataclasses, JSON via ``graphmend.model.to_dict``.

JSON shape: ``graphmend/schemas/bench.schema.json``. Times are seconds; ratios are "how many
times better after the fix": ``before / after`` for times, ``after / before`` for throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from graphmend.model import SCHEMA_VERSION, Environment


@dataclass(frozen=True)
class ArmTiming:
    """One arm (tree) at one batch size, aggregated over its fresh-process runs."""

    cold_start_s: float  # median over runs of the first call's wall time, compilation included
    steady_s: float  # median over runs of each run's median call time
    steady_min_s: float
    throughput: Optional[float]  # items per second at steady state
    eager_steady_s: Optional[float] = None  # the same tree without torch.compile, for reference
    graph_count: int = 0
    cuda_syncs_per_call: Optional[float] = None
    runs: int = 0


@dataclass(frozen=True)
class BenchPoint:
    """Before vs after at one batch size (``None``: the target's own inputs)."""

    batch_size: Optional[int]
    before: ArmTiming
    after: ArmTiming
    cold_start_ratio: float
    steady_ratio: float
    throughput_ratio: Optional[float]
    eager_speedup_after: Optional[float] = None  # eager / compiled steady state of the fixed tree


@dataclass(frozen=True)
class TargetBench:
    name: str
    points: tuple[BenchPoint, ...] = ()
    error: Optional[str] = None
    environment: Environment = field(default_factory=Environment)


@dataclass(frozen=True)
class BenchReport:
    base: str
    targets: tuple[TargetBench, ...] = ()
    warmup: int = 3
    repeat: int = 20
    rounds: int = 2
    threads: int = 1
    version: int = SCHEMA_VERSION

    @property
    def failed(self) -> bool:
        """A target that could not be measured is never green."""
        return any(t.error for t in self.targets)
