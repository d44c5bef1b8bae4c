"""The values ``bench`` returns: frozen dataclasses, JSON via ``graphmend.model.to_dict``.

JSON shape: ``graphmend/schemas/bench.schema.json``. Times are seconds; ratios are "how many
times better after the fix": ``before / after`` for times, ``after / before`` for throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from graphmend.bench.stats import CONFIDENCE, DEFAULT_ROUNDS, MIN_EFFECT
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
    # One figure per fresh process (round), the samples the intervals are computed from.
    cold_start_runs: tuple[float, ...] = ()
    steady_runs: tuple[float, ...] = ()
    eager_runs: tuple[float, ...] = ()


@dataclass(frozen=True)
class BenchPoint:
    """Before vs after at one batch size (``None``: the target's own inputs).

    Each ``<metric>_ratio`` is the Hodges-Lehmann estimate over the rounds (with one round, the
    plain ratio), ``<metric>_ci`` its interval at the report's confidence (``None``: too few
    rounds), ``<metric>_verdict`` one of ``faster`` / ``slower`` / ``no-change``.
    ``eager_ratio`` compares the uncompiled trees: what the rewrite costs or buys without
    ``torch.compile``."""

    batch_size: Optional[int]
    before: ArmTiming
    after: ArmTiming
    cold_start_ratio: float
    steady_ratio: float
    throughput_ratio: Optional[float]
    eager_speedup_after: Optional[float] = None  # eager / compiled steady state of the fixed tree
    cold_start_ci: Optional[tuple[float, float]] = None
    cold_start_verdict: str = "no-change"
    steady_ci: Optional[tuple[float, float]] = None
    steady_verdict: str = "no-change"
    throughput_ci: Optional[tuple[float, float]] = None
    throughput_verdict: Optional[str] = None
    eager_ratio: Optional[float] = None
    eager_ci: Optional[tuple[float, float]] = None
    eager_verdict: Optional[str] = None
    noise: Optional[str] = None  # why some figure could not be decided, and what to change


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
    rounds: int = DEFAULT_ROUNDS
    threads: int = 1
    version: int = SCHEMA_VERSION
    confidence: float = CONFIDENCE
    min_effect: float = MIN_EFFECT  # a ratio within 1 ± this is no-change, however narrow its interval
    source_changed: Optional[bool] = None  # False: the trees' source files are identical
    load_average: Optional[float] = None  # one-minute load average when the measurement started
    load_average_after: Optional[float] = None
    cpus: Optional[int] = None  # CPUs this process may use

    @property
    def busy(self) -> bool:
        """Other work had every CPU busy when measuring started."""
        return self.load_average is not None and self.cpus is not None and self.load_average >= self.cpus

    @property
    def measured(self) -> bool:
        return self.source_changed is not False or bool(self.targets)

    @property
    def failed(self) -> bool:
        """A target that could not be measured is never green."""
        return any(t.error for t in self.targets)
