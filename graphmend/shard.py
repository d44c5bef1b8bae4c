"""Sharding over a CI matrix: ``--shard i/n`` analyses one share of the targets and writes a
partial review; ``graphmend merge`` joins the partials into one ``review.json``.

The shares are deterministic and balanced: targets are taken longest first (by the duration
recorded in the base's cached results) and each goes to the least loaded shard, ties to the
lower index, names breaking ties between equal durations. Every shard must plan the same
shares, yet each may hold another part of the base's results (on ephemeral runners each shard
restores the entry it saved itself, which holds its own share): so durations are used only when
every target has one, and otherwise every target weighs the same (a share is then balanced by
count, and the same whatever part of the record a shard holds). Every partial carries the
whole plan, so ``merge`` knows which targets a shard that did not report was to analyse.
Shard 1 also does the static pass.

``merge`` refuses partials of different base or head commits or configurations, or two for one
shard. A shard with no partial is a failed one: its targets become "not-analysed" with an error
naming the shard, so the gate fails closed (``bot.gate`` fails on a target with an error), and
the merge exits non-zero. The plans are checked against the configured targets (every partial
records them; ``merge`` run in a checkout that holds the base commit reads them from the base's
configuration instead): a configured target that no shard planned is "not-analysed" too, named,
and a plan that names a target not configured is refused.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

SHARD_MAX = 256


class ShardError(Exception):
    """Partials that cannot be joined, or a bad ``--shard``; ``str()`` is one line."""


def parse(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4): shard 2 of 4, counted from 1."""
    m = re.fullmatch(r"\s*(\d{1,3})\s*/\s*(\d{1,3})\s*", text or "")
    if not m:
        raise ShardError(f"--shard {text!r}: expected I/N, e.g. 1/4")
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= index <= count <= SHARD_MAX:
        raise ShardError(f"--shard {text}: I must be between 1 and N, and N at most {SHARD_MAX}")
    return index, count


def plan(names: Sequence[str], durations: dict[str, Optional[float]], count: int) -> tuple[tuple[str, ...], ...]:
    """``count`` shares of ``names``, balanced by ``durations`` (longest first, to the least
    loaded) when every name has one, else by count: a shard that knows only some durations
    plans what one that knows none does."""
    complete = all((durations.get(n) or 0) > 0 for n in names)
    # Rounded to a tenth of a second: a run's jitter does not move a target between shards.
    weight = {n: round(durations[n], 1) if complete else 1.0 for n in names}  # type: ignore[arg-type]
    loads = [0.0] * count
    shares: list[list[str]] = [[] for _ in range(count)]
    for name in sorted(set(names), key=lambda n: (-weight[n], n)):
        i = min(range(count), key=lambda k: (loads[k], k))
        shares[i].append(name)
        loads[i] += weight[name]
    return tuple(tuple(sorted(s)) for s in shares)


def merge(partials: Sequence, sources: Sequence[str] = (), configured: Optional[Sequence[str]] = None):
    """One review from the partials, the problems found (missing shards, unplanned targets), and
    its verdict: ``(Review, problems, Verdict)``. ``configured``: the targets the base's
    configuration has, read from a checkout (default: those the partials recorded)."""
    from bot import review as rv
    from bot.gate import compute_verdict

    if not partials:
        raise ShardError("no partial reviews to merge")
    names = list(sources) or [f"partial {i + 1}" for i in range(len(partials))]
    first = partials[0]
    by_index: dict[int, object] = {}
    for name, p in zip(names, partials):
        if p.shard is None:
            raise ShardError(f"{name} is not a partial review (it has no shard; write it with graphmend pr --shard I/N)")
        for what, mine, theirs in (("base commit", p.base_sha, first.base_sha), ("head commit", p.head_sha, first.head_sha),
                                   ("configuration", p.shard.config_digest, first.shard.config_digest),
                                   ("shard count", p.shard.count, first.shard.count), ("settings", p.settings, first.settings)):
            if mine != theirs:
                raise ShardError(f"{name} is for another {what} ({str(mine)[:40]}, not {str(theirs)[:40]}): "
                                 f"partials of one run only")
        if p.shard.index in by_index:
            raise ShardError(f"{name}: two partials for shard {p.shard.index}/{p.shard.count}")
        if len(p.shard.plan) != p.shard.count:
            raise ShardError(f"{name}: its plan has {len(p.shard.plan)} shares for {p.shard.count} shards")
        if p.shard.targets != first.shard.targets:
            raise ShardError(f"{name} is for other targets than {names[0]}: partials of one run only")
        by_index[p.shard.index] = p
    count = first.shard.count
    plans = {p.shard.plan for p in partials}
    expected = sorted(set(first.shard.targets if configured is None else configured))
    planned = {n for plan_ in plans for share in plan_ for n in share}
    stray = sorted(planned - set(expected))
    if stray:
        raise ShardError(f"the shards planned targets that are not configured ({', '.join(stray)[:300]}): "
                         + ("partials of one run only" if configured is None
                            else "the partials are not of this checkout's base configuration"))
    problems: list[str] = []
    if len(plans) > 1:
        problems.append("the shards planned different shares (restore the same cache in every shard); "
                        "targets no shard analysed are marked not-analysed")
    targets: dict[str, object] = {}
    findings: list = []
    for index in sorted(by_index):
        p = by_index[index]
        mine = set(p.shard.plan[index - 1]) if index <= len(p.shard.plan) else set()
        for t in p.targets:
            if t.name in mine and t.name not in targets:
                targets[t.name] = t
        findings += [f for f in p.findings if f.target is None or f.target in mine]
    # Shard 1's static pass knew only its own targets' traced files: a static candidate at a site a
    # target of another shard reported is that break, told once (as the unsharded run tells it).
    seen = {(f.file, f.line) for f in findings if f.target is not None} | {f.fingerprint for f in findings if f.target is not None}
    findings = [f for f in findings if f.target is not None or ((f.file, f.line) not in seen and f.fingerprint not in seen)]
    problems += [f"shard {index}/{count} did not report: its targets were not analysed (the gate fails)"
                 for index in range(1, count + 1) if index not in by_index]
    for plan_ in plans:
        for index, share in enumerate(plan_, start=1):
            for name in share:
                if name not in targets:
                    why = (f"not analysed: shard {index}/{count} did not report" if index not in by_index
                           else f"not analysed: no shard reported it (shard {index}/{count} planned other targets)")
                    targets[name] = rv.TargetSummary(name=name, head=rv.Counts(0, 0, why), status="not-analysed", reason=why)
    unplanned = [n for n in expected if n not in planned]
    if unplanned:
        problems.append(f"{len(unplanned)} configured target(s) in no shard's plan, not analysed (the gate fails): "
                        + ", ".join(unplanned)[:1500])
    for name in unplanned:
        why = "not analysed: configured, but in no shard's plan"
        targets[name] = rv.TargetSummary(name=name, head=rv.Counts(0, 0, why), status="not-analysed", reason=why)
    for index in range(1, count + 1):
        if index not in by_index:
            # The shard itself is a target that could not run: whoever recomputes the gate from
            # this review (graphmend post does) fails it, naming the shard.
            share = sorted({n for plan_ in plans for n in (plan_[index - 1] if index <= len(plan_) else ())})
            why = (f"shard {index}/{count} did not report: not analysed: "
                   + (", ".join(share)[:1500] if share else "no targets") + ("; nor the static candidates" if index == 1 else ""))
            targets[f"shard-{index}-of-{count}"] = rv.TargetSummary(name=f"shard-{index}-of-{count}", head=rv.Counts(0, 0, why),
                                                                    status="not-analysed", reason=why)
    stages = _stages(partials)
    errors = tuple(e for p in partials for e in p.errors)
    errors += tuple(rv.FileError(f"shard {i}/{count}", "this shard did not report; its targets were not analysed")
                    for i in range(1, count + 1) if i not in by_index)
    review = rv.Review(base_sha=first.base_sha, head_sha=first.head_sha, settings=first.settings, stages=stages,
                       targets=tuple(targets[n] for n in sorted(targets)),
                       findings=tuple(sorted(findings, key=finding_order)), errors=errors[:500],
                       timing=_timing(partials))
    verdict = compute_verdict(review)
    return dataclasses.replace(review, verdict="passed" if verdict.passed else "failed"), problems, verdict


def finding_order(f) -> tuple:  # noqa: ANN001 - bot.review.Finding
    return (f.file, f.line, f.status, f.fingerprint, f.target or "")


def _stages(partials: Sequence) -> tuple:
    from bot import review as rv

    out = []
    for name in dict.fromkeys(s.name for p in partials for s in p.stages):
        mine = [s for p in partials for s in p.stages if s.name == name]
        reasons = list(dict.fromkeys(s.reason for s in mine if s.reason))
        out.append(rv.Stage(name, all(s.ran for s in mine), "; ".join(reasons)[:2000]))
    return tuple(out)


def _timing(partials: Sequence):  # noqa: ANN202 - bot.review.Timing
    from bot import review as rv

    timings = [p.timing for p in partials if p.timing is not None]
    if not timings:
        return None
    stages: dict[str, float] = {}
    for t in timings:
        for s in t.stages:
            stages[s.name] = max(stages.get(s.name, 0.0), s.seconds)  # shards run side by side: the slowest
    caches = {t.cache for t in timings}
    return rv.Timing(stages=tuple(rv.StageTime(n, v) for n, v in stages.items()), total_s=max(t.total_s for t in timings),
                     targets_analysed=sum(t.targets_analysed for t in timings),
                     targets_unaffected=sum(t.targets_unaffected for t in timings),
                     base_targets_cached=sum(t.base_targets_cached for t in timings),
                     base_targets_run=sum(t.base_targets_run for t in timings),
                     cache=caches.pop() if len(caches) == 1 else "partial")


# ---------------------------------------------------------------------------------------------
# scan: partial check reports

SCAN_KIND = "graphmend-scan-partial"
SCAN_PARTIAL_MAX_BYTES = 256 * 1024 * 1024


def scan_partial(report, commit: str, index: int, count: int, config_digest: str,
                 plan_: tuple[tuple[str, ...], ...]) -> dict:
    """The JSON of one scan shard: its targets' results (and, in shard 1, the static pass)."""
    from graphmend.model import to_dict

    return {"kind": SCAN_KIND, "version": 1, "commit": commit,
            "shard": {"index": index, "count": count, "config_digest": config_digest, "plan": [list(s) for s in plan_]},
            "report": to_dict(report)}


def read_scan_partial(data: object, source: str) -> dict:
    """A scan partial checked against ``scan-partial.schema.json`` (its report against ``check``)."""
    from graphmend import schemas

    try:
        schemas.validate("scan-partial", data)
        schemas.validate("check", data["report"])  # type: ignore[index]
    except (ValueError, RecursionError) as exc:
        raise ShardError(f"{source}: not a scan partial: {str(exc)[:300]}") from None
    return data  # type: ignore[return-value]


def merge_scan(partials: Sequence[dict], sources: Sequence[str] = ()):  # -> (CheckReport, problems)
    """One check report from scan partials; a missing shard's targets become errors naming it."""
    from graphmend.affected import without_traced
    from graphmend.model import CheckReport, TargetResult, from_dict

    if not partials:
        raise ShardError("no partial reports to merge")
    names = list(sources) or [f"partial {i + 1}" for i in range(len(partials))]
    first = partials[0]
    by_index: dict[int, dict] = {}
    for name, p in zip(names, partials):
        for what, key in (("commit", lambda d: d["commit"]), ("configuration", lambda d: d["shard"]["config_digest"]),
                          ("shard count", lambda d: d["shard"]["count"])):
            if key(p) != key(first):
                raise ShardError(f"{name} is for another {what} ({str(key(p))[:40]}, not {str(key(first))[:40]}): "
                                 f"partials of one run only")
        index = p["shard"]["index"]
        if index in by_index:
            raise ShardError(f"{name}: two partials for shard {index}/{p['shard']['count']}")
        by_index[index] = p
    count = first["shard"]["count"]
    targets: dict[str, TargetResult] = {}
    static: tuple = ()
    errors: tuple = ()
    for index in sorted(by_index):
        p = by_index[index]
        report = from_dict(CheckReport, p["report"])
        mine = set(p["shard"]["plan"][index - 1]) if index <= len(p["shard"]["plan"]) else set()
        for t in report.targets:
            if t.name in mine:
                targets.setdefault(t.name, t)
        if index == 1:
            static = report.static
        errors += report.errors
    problems = [f"shard {i}/{count} did not report: its targets were not analysed" for i in range(1, count + 1)
                if i not in by_index]
    for p in by_index.values():
        for index, share in enumerate(p["shard"]["plan"], start=1):
            for name in share:
                if name not in targets:
                    targets[name] = TargetResult(name=name, error=f"not analysed: shard {index}/{count} did not report"
                                                 if index not in by_index else "not analysed: no shard reported it")
    if 1 not in by_index:
        from graphmend.model import FileError

        errors += (FileError(f"shard 1/{count}", "this shard did not report: static candidates were not checked"),)
    ordered = tuple(targets[n] for n in sorted(targets))
    return CheckReport(targets=ordered, static=without_traced(static, ordered), errors=errors), problems
