"""The merge gate: a verdict computed from the findings, never read from review.json.

Like PyTorch's graph-break ratchet, a pull request fails when it adds breaks. "New" means
present on the head, absent on the base, and not accepted in the baseline file *as it is on
the base branch*: a pull request cannot accept its own breaks by editing the baseline.
``graphmend pr`` marks findings ``baselined`` from the base branch's file; ``graphmend post``
can re-mark them from a trusted copy of that file (``apply_baseline``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterable

from bot.review import Finding, Review


@dataclass(frozen=True)
class Verdict:
    passed: bool
    new: int  # introduced and not accepted by the baseline
    fixed: int
    unchanged: int
    accepted: int  # introduced but accepted by the base branch's baseline
    failed_targets: tuple[str, ...]
    fail_on: str
    headline: str


def baseline_fingerprints(text: str) -> frozenset[str]:
    """Fingerprints accepted by a baseline file: ``{"fingerprints": [...]}``, or any JSON
    whose objects carry a ``"fingerprint"`` key (a list of breaks)."""
    data = json.loads(text)
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            fps = node.get("fingerprints")
            if isinstance(fps, list):
                found.update(str(f) for f in fps if isinstance(f, str))
            fp = node.get("fingerprint")
            if isinstance(fp, str):
                found.add(fp)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return frozenset(found)


def apply_baseline(review: Review, accepted: Iterable[str]) -> Review:
    """The review with every finding's ``baselined`` flag recomputed from a trusted baseline."""
    accepted = frozenset(accepted)
    findings = tuple(dataclasses.replace(f, baselined=f.fingerprint in accepted) for f in review.findings)
    return review.with_findings(findings)


def is_new(finding: Finding) -> bool:
    return finding.status == "introduced" and not finding.baselined


def compute_verdict(review: Review, fail_on: str | None = None) -> Verdict:
    """Pass or fail from the findings and the targets' errors; ``fail_on`` overrides the review's."""
    fail_on = fail_on or review.settings.fail_on
    new = sum(1 for f in review.findings if is_new(f))
    fixed = sum(1 for f in review.findings if f.status == "fixed")
    unchanged = sum(1 for f in review.findings if f.status == "unchanged")
    accepted = sum(1 for f in review.findings if f.status == "introduced" and f.baselined)
    failed_targets = tuple(
        sorted(t.name for t in review.targets if (t.head and t.head.error) or (t.base and t.base.error))
    )
    head_breaks = sum(1 for f in review.findings if f.status != "fixed" and not f.baselined)
    if fail_on == "never":
        passed = True
    elif fail_on == "any-break":
        passed = head_breaks == 0 and not failed_targets
    else:
        passed = new == 0 and not failed_targets
    if failed_targets:
        headline = f"{len(failed_targets)} target(s) could not run"
    elif new:
        headline = f"this pull request adds {new} graph break{'s' if new != 1 else ''}"
    elif fail_on == "any-break" and head_breaks:
        headline = f"{head_breaks} graph break{'s' if head_breaks != 1 else ''} remain"
    else:
        headline = "no new graph breaks"
    return Verdict(passed, new, fixed, unchanged, accepted, failed_targets, fail_on, headline)
