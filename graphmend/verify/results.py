"""The values ``verify`` returns: frozen dataclasses that go to JSON with ``graphmend.model.to_dict``.

JSON shape: ``graphmend/schemas/verify.schema.json``. No torch here, so reporters and the
bot can read a verify report without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from graphmend.model import SCHEMA_VERSION, Environment, Fix


@dataclass(frozen=True)
class Mismatch:
    """One way the "after" tree behaved differently from the "before" tree.

    ``kind``: ``output`` (values), ``grad``, ``structure`` (different outputs or keys),
    ``stdout``, ``stderr``, ``log``, ``warning``, ``order`` (the same streams, interleaved
    otherwise), ``exception``, ``input`` (an argument written in place differently), ``state``
    (module state after the call, or state_dict keys that differ).
    ``check``: ``eager`` (eager after vs eager before, tight) or ``compiled`` (compiled after
    vs compiled before, within the dtype's tolerances).
    """

    kind: str
    check: str
    case: str  # "example", "inputs[2]", or "" when not about one input
    detail: str


@dataclass(frozen=True)
class TargetVerification:
    """Equivalence of one target, before vs after, and its graphs and breaks."""

    name: str
    ok: bool
    cases: int = 0
    failing_cases: int = 0  # cases that raise (in both trees, checked in throwaway processes)
    graphs_before: Optional[int] = None
    graphs_after: Optional[int] = None
    breaks_before: Optional[int] = None
    breaks_after: Optional[int] = None
    recompiles_before: Optional[int] = None  # frames compiled again over all the cases
    recompiles_after: Optional[int] = None
    max_abs_error_eager: float = 0.0
    max_rel_error_eager: float = 0.0
    max_abs_error_compiled: float = 0.0
    max_rel_error_compiled: float = 0.0
    mismatches: tuple[Mismatch, ...] = ()
    # The original's own behaviour the rewrite was judged against, one line each: two eager
    # runs that differ (dropout, random re-initialisation), eager vs compiled differences.
    baseline: tuple[str, ...] = ()
    baseline_spread_eager: float = 0.0  # max abs difference between two eager runs of the original
    baseline_spread_compiled: float = 0.0  # max abs difference between the original's compiled and eager runs
    error: Optional[str] = None  # the target could not run (then ``ok`` is False)
    environment: Environment = field(default_factory=Environment)
    duration_s: float = 0.0
    # Why the target was not run on this tree: the change cannot reach it (it reads none of the
    # files changed, ``graphmend.affected.why_changes_reach``); its counts are the original's.
    unaffected: str = ""


@dataclass(frozen=True)
class FixVerdict:
    """Whether one fix kept the program's behaviour; a fix that fails is withdrawn."""

    fingerprint: str
    rule: str
    file: str
    line: int
    ok: bool
    alone: bool  # verified alone
    together: Optional[bool] = None  # verified with all the fixes that pass alone (None: not run)
    reason: str = ""  # why it was withdrawn, in one line


@dataclass(frozen=True)
class VerifyReport:
    """What ``graphmend verify`` found. ``fixes`` is filled by ``verify_fixes``."""

    base: str
    targets: tuple[TargetVerification, ...] = ()
    fixes: tuple[FixVerdict, ...] = ()
    grad: bool = False
    errors: tuple[str, ...] = ()
    # None: not compared (verify_fixes); False: the two trees hold the same bytes, so there is
    # nothing to verify (the targets run only when asked, as a check of verify itself)
    source_changed: Optional[bool] = None
    changed_files: tuple[str, ...] = ()  # repo-relative files that differ, before -> after
    version: int = SCHEMA_VERSION

    @property
    def failed(self) -> bool:
        """A target that differs, could not run, or a withdrawn fix: never green."""
        return bool(self.errors) or any(not t.ok for t in self.targets) or any(not f.ok for f in self.fixes)

    @property
    def withdrawn(self) -> tuple[FixVerdict, ...]:
        return tuple(f for f in self.fixes if not f.ok)

    def kept(self, fixes: Sequence[Fix]) -> tuple[Fix, ...]:
        """Of the ``fixes`` given to ``verify_fixes`` (same order), those that passed; the rest
        are withdrawn from what ``fix`` applies and what the bot suggests."""
        if len(fixes) != len(self.fixes):
            raise ValueError(f"{len(fixes)} fixes given, {len(self.fixes)} verified")
        return tuple(f for f, v in zip(fixes, self.fixes) if v.ok)

    @property
    def passed_fingerprints(self) -> frozenset[str]:
        return frozenset(f.fingerprint for f in self.fixes if f.ok)
