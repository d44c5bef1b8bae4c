"""``review.json``: the model of a finished analysis, and its validation.

``graphmend pr`` writes it next to the pull request's code; ``graphmend post`` reads it in a
job that holds a token. So every value in it is untrusted: it is validated against
``graphmend/schemas/review.schema.json`` before anything else looks at it, strings are
escaped when rendered, and the verdict is recomputed from the findings (``gate.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import jsonschema

from graphmend.model import from_dict, to_dict

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "graphmend" / "schemas" / "review.schema.json"
VERSION = 1
# What the schema's limits allow with room to spare (5000 targets and findings, a shard's plan of
# 256 x 5000 names): no more is parsed, so an artifact cannot make its reader hold gigabytes.
MAX_BYTES = 256 * 1024 * 1024
MAX_VALUES = 2_000_000


class ReviewError(Exception):
    """review.json is unreadable or does not match its schema; ``str()`` is one line."""


@dataclass(frozen=True)
class Settings:
    safety: str = "safe"
    suggestions: bool = True
    comment: str = "on-change"
    fail_on: str = "new-breaks"


@dataclass(frozen=True)
class Stage:
    name: str
    ran: bool
    reason: str = ""


@dataclass(frozen=True)
class Counts:
    break_count: int
    graph_count: int
    error: Optional[str] = None


@dataclass(frozen=True)
class Benchmark:
    cold_start_before_s: Optional[float] = None
    cold_start_after_s: Optional[float] = None
    steady_before_ms: Optional[float] = None
    steady_after_ms: Optional[float] = None
    speedup: Optional[float] = None  # steady state, before / after
    max_error: Optional[float] = None
    # The interval of ``speedup`` and what it means (bench's verdict: faster / slower / no-change);
    # only a ``faster`` verdict is called faster.
    speedup_ci: Optional[tuple[float, float]] = None
    verdict: Optional[str] = None
    cold_start_speedup: Optional[float] = None
    cold_start_ci: Optional[tuple[float, float]] = None
    cold_start_verdict: Optional[str] = None


@dataclass(frozen=True)
class TargetSummary:
    name: str
    base: Optional[Counts] = None
    head: Optional[Counts] = None
    benchmark: Optional[Benchmark] = None
    # analysed: ran on the head; unaffected: the pull request changes no file it reads, so the
    # base's results stand for the head; not-analysed: no result (a shard that did not report)
    status: Optional[str] = None
    reason: str = ""
    duration_s: Optional[float] = None  # the head run's seconds (the base's when carried forward)


@dataclass(frozen=True)
class Edit:
    file: str
    start_line: int
    end_line: int
    new_text: str
    old_text: str = ""


@dataclass(frozen=True)
class FileChange:
    """A whole file a fix needs created or replaced (the one-time runtime module beside the
    package it serves): ``status`` is ``created`` (absent at the head) or ``updated`` (an older
    copy is replaced). No suggestion can create a file, so it goes by ``/graphmend apply`` or as
    a patch."""

    path: str
    status: str  # created | updated
    new_text: str


@dataclass(frozen=True)
class Verification:
    status: str  # passed | failed | not-run
    detail: str = ""
    max_error: Optional[float] = None
    breaks_before: Optional[int] = None
    breaks_after: Optional[int] = None


@dataclass(frozen=True)
class FixProposal:
    rule: str
    title: str
    safety: str
    edits: tuple[Edit, ...]
    verification: Optional[Verification] = None
    benchmark: Optional[Benchmark] = None
    files: tuple[FileChange, ...] = ()  # files created or replaced whole (deduplicated across fixes)

    @property
    def is_single_range(self) -> bool:
        return len(self.edits) == 1


@dataclass(frozen=True)
class Finding:
    fingerprint: str
    status: str  # introduced | fixed | unchanged
    file: str
    line: int
    reason: str
    baselined: bool = False
    gb_id: Optional[str] = None
    category: str = "other"
    rule: Optional[str] = None
    target: Optional[str] = None
    verified: bool = False
    fix: Optional[FixProposal] = None
    decline: Optional[str] = None


@dataclass(frozen=True)
class FileError:
    path: str
    message: str


@dataclass(frozen=True)
class StageTime:
    name: str
    seconds: float


@dataclass(frozen=True)
class Timing:
    """Where the time went: wall seconds per stage, and what was not run."""

    stages: tuple[StageTime, ...] = ()
    total_s: float = 0.0
    targets_analysed: int = 0
    targets_unaffected: int = 0
    base_targets_cached: int = 0  # of the base's targets, how many came from the cache
    base_targets_run: int = 0
    cache: str = "off"  # hit | partial | miss | off


@dataclass(frozen=True)
class Shard:
    """A partial review: shard ``index`` of ``count`` analysed ``plan[index - 1]``; ``targets``
    are the configured ones, which the plan must cover."""

    index: int
    count: int
    config_digest: str
    plan: tuple[tuple[str, ...], ...] = ()
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Review:
    base_sha: str
    head_sha: str
    settings: Settings = field(default_factory=Settings)
    stages: tuple[Stage, ...] = ()
    targets: tuple[TargetSummary, ...] = ()
    findings: tuple[Finding, ...] = ()
    errors: tuple[FileError, ...] = ()
    verdict: Optional[str] = None
    timing: Optional[Timing] = None
    shard: Optional[Shard] = None
    version: int = VERSION

    def with_findings(self, findings: tuple[Finding, ...]) -> "Review":
        import dataclasses

        return dataclasses.replace(self, findings=findings)


_SCHEMA: Optional[dict[str, Any]] = None


def schema() -> dict[str, Any]:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return _SCHEMA


def validate(data: Any) -> None:
    """Raise ``ReviewError`` naming the first offending item when ``data`` breaks the schema."""
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        message = err.message if len(err.message) < 200 else err.message[:200] + "..."
        raise ReviewError(f"review.json: {where}: {message}")


def from_json(data: Any) -> Review:
    validate(data)
    body = {k: v for k, v in data.items() if k != "version"}
    return from_dict(Review, body)


def load(path: Path | str) -> Review:
    """Read, validate and build a ``Review``; every failure is a one-line ``ReviewError``."""
    from graphmend.runner.channel import ChannelError, read_json

    path = Path(path)
    try:
        # An artifact of the job that ran the pull request's code: read as a worker's file is.
        data = read_json(path.parent, path.name, MAX_BYTES, max_values=MAX_VALUES)
    except ChannelError as exc:
        raise ReviewError(f"{path}: {exc}") from None
    except OSError as exc:
        raise ReviewError(f"{path}: cannot read: {exc.strerror}") from None
    return from_json(data)


def dump(review: Review) -> str:
    """The JSON text of a review (validated, so a writer cannot produce what post refuses)."""
    data = to_dict(review)
    for optional in ("verdict", "timing", "shard"):
        if data.get(optional) is None:
            data.pop(optional, None)
    validate(data)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
