"""``graphmend pr``: analyse a pull request and write ``review.json`` (it never posts).

The base and head commits come from the event payload (``pull_request.base.sha`` and
``.head.sha``; not ``GITHUB_SHA``, which is the merge commit GitHub made, whose line numbers
do not match the pull request's diff) or from ``--base`` / ``--head``. Both trees are
written out from their blobs exactly as committed (never through the head's own
``.gitattributes``) and analysed with the *base*'s configuration (``scope_config``),
so the two sides are measured the same way and a pull request cannot narrow the analysis that
gates it; a change it makes to the configuration is reported beside the result (the "config"
stage) for a maintainer to accept by merging. The base's results are cached by base SHA (and a
digest of the configuration and versions, ``graphmend.cache``) so that repeated runs on one pull
request do not run the base's targets again, and only the targets the pull request can affect
run on the head (``graphmend.affected``); ``--shard I/N`` analyses one share (``graphmend.shard``).

Breaks are matched by fingerprint into introduced / fixed by the PR / unchanged. The gate's
settings and the baseline are read from the *base* commit too: a pull request cannot accept
its own breaks, or switch the gate off, by editing them. Fixes are proposed and verified for the
introduced breaks only. A stage that cannot run is recorded in review.json with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from graphmend import fsutil
from graphmend.affected import changed_files, outside_share, run_sides
from graphmend.cache import load as load_entry
from graphmend.cache import store as store_entry
from graphmend.shard import plan as plan_shards
from graphmend.cache import cache_key, config_digest, default_cache_dir  # noqa: F401 - default_cache_dir: the CLI's
from graphmend.config import CONFIG_NAMES, Config, ConfigError, load_config, load_yaml, parse_config
from graphmend.model import CheckReport, Fix, GraphBreak, fingerprint
from graphmend.report import lever_text
from graphmend.runner import unsandboxed_reason
from graphmend.sources import SourceError, read_source, split_lines

Progress = Optional[Callable[[str], None]]


UNSANDBOXED_REFUSAL = ("refusing to run the pull request's code without a sandbox: {why}; use sandbox.runner: docker "
                       "with a sandbox.image, install bubblewrap, or accept the risk with --allow-unsandboxed "
                       "(the action's allow-unsandboxed: true)")


class PrError(Exception):
    """A pull request that cannot be analysed as asked; ``str()`` is one line."""


@dataclass(frozen=True)
class PrResult:
    review: Any  # bot.review.Review
    verdict: Any  # bot.gate.Verdict
    base_from_cache: bool


# ---------------------------------------------------------------------------------------------
# Base and head


def shas_from_event(payload: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    pr = payload.get("pull_request") or {}
    return ((pr.get("base") or {}).get("sha"), (pr.get("head") or {}).get("sha"))


def resolve(root: Path, rev: str, what: str) -> str:
    if not rev or rev.startswith("-"):
        raise PrError(f"{what}: not a revision: {rev!r}")
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PrError(f"{what} commit {rev} is not in the checkout at {root} (fetch it, e.g. actions/checkout with fetch-depth: 0)")
    return done.stdout.strip()


def _git_show(root: Path, sha: str, rel: str) -> Optional[str]:
    done = subprocess.run(["git", "show", f"{sha}:{rel}"], cwd=root, capture_output=True)
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


# ---------------------------------------------------------------------------------------------
# Matching


def _fp(b: GraphBreak) -> str:
    if b.fingerprint and re.fullmatch(r"[0-9a-f]{8,64}", b.fingerprint):
        return b.fingerprint
    return fingerprint(b.file, b.function, b.gb_id or b.category.value, b.source_line or str(b.line))


def _keyed(report: CheckReport) -> dict[tuple[Optional[str], str], GraphBreak]:
    out: dict[tuple[Optional[str], str], GraphBreak] = {}
    for t in report.targets:
        for b in t.breaks:
            out.setdefault((t.name, _fp(b)), dataclasses.replace(b, target=t.name))
    for b in report.static:
        out.setdefault((None, _fp(b)), dataclasses.replace(b, target=None))
    return out


def match(base: CheckReport, head: CheckReport) -> list[tuple[str, GraphBreak]]:
    """(status, break) for every break on either side: introduced, fixed or unchanged."""
    b, h = _keyed(base), _keyed(head)
    out = [("introduced" if k not in b else "unchanged", v) for k, v in h.items()]
    out += [("fixed", v) for k, v in b.items() if k not in h]
    return sorted(out, key=lambda sv: (sv[1].file, sv[1].line, sv[0], _fp(sv[1]), sv[1].target or ""))


# ---------------------------------------------------------------------------------------------
# The analysis


def _read_config(root: Path, sha: str, config_name: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(name, text) of the configuration file at ``sha``, or (None, None) when there is none."""
    for name in ([config_name] if config_name else list(CONFIG_NAMES)):
        text = _git_show(root, sha, name)
        if text is not None:
            return name, text
    return None, None


def _parse_at(root: Path, sha: str, name: str, text: str) -> Config:
    return parse_config(load_yaml(text, f"{name} at {sha[:7]}"), root=root, shown=f"{name} at {sha[:7]}")


def scope_config(root: Path, base_sha: str, config_name: Optional[str]) -> tuple[Config, frozenset[str], str]:
    """What decides the gate, as it is on the base branch: the analysis scope (targets, paths,
    exclude), the fix and gate policy, the review settings, and the accepted fingerprints.

    A base without a configuration file has the default scope (static checks of the whole
    tree, no targets, ``fail_on: new-breaks``); a base whose file cannot be read has it too, and
    the third value says why ("" otherwise).
    """
    from bot.gate import baseline_fingerprints

    config, problem = Config(root=root), ""
    run_file = None
    if config_name and Path(config_name).is_absolute():
        # A file of this run (the action's inputs merged into a copy), not of the repository:
        # the scope is still the base branch's; only where the code runs is the run's to say.
        run_file, config_name = Path(config_name), None
    name, text = _read_config(root, base_sha, config_name)
    if name is not None and text is not None:
        try:
            config = _parse_at(root, base_sha, name, text)
        except ConfigError as exc:
            problem = f"the base branch's configuration is invalid, so the default scope decides the gate: {exc}"
    if run_file is not None:
        config = dataclasses.replace(config, sandbox=_run_sandbox(root, run_file, config.sandbox))
    baseline_text = _git_show(root, base_sha, config.gate.baseline)
    accepted: frozenset[str] = frozenset()
    if baseline_text:
        try:
            accepted = baseline_fingerprints(baseline_text)
        except ValueError:
            accepted = frozenset()
    return config, accepted, problem


def _run_sandbox(root: Path, run_file: Path, base: Any) -> Any:
    """The base branch's sandbox settings with the keys the run's file sets (the action's inputs)
    over them, checked together: a setting the run does not name (memory, timeout, image) stays
    the base's, never the checkout's."""
    try:
        data = load_yaml(run_file.read_text(encoding="utf-8"), str(run_file))
    except OSError as exc:
        raise ConfigError(str(run_file), "(file)", "a readable YAML file", exc.strerror or str(exc)) from None
    named = data.get("sandbox") if isinstance(data, dict) else None
    merged = {k: v for k, v in dataclasses.asdict(base).items() if v is not None}
    merged.update(named if isinstance(named, dict) else {})
    return parse_config({"sandbox": merged}, root=root, shown=str(run_file)).sandbox


def _head_config(root: Path, head_sha: str, config_name: Optional[str]) -> Optional[Config]:
    """The pull request's own configuration (only to see which targets' entries it changes), or None."""
    if config_name and Path(config_name).is_absolute():
        config_name = None
    name, text = _read_config(root, head_sha, config_name)
    if name is None or text is None:
        return None
    try:
        return _parse_at(root, head_sha, name, text)
    except ConfigError:
        return None


def _reading(config: Config, sides: tuple[CheckReport, ...], edited: set[str]) -> Config:
    """``config`` with the targets an edit of ``edited`` can change: those whose record (on the
    base or the head) includes one of the files, and those without one. A fix is proved on
    every target it can change (in a shard too: ``graphmend.affected.outside_share``)."""
    records = _reads(sides)
    keep = {n for n, rec in records.items() if rec is None or edited & set(rec)}
    return dataclasses.replace(config, targets=tuple(t for t in config.targets if t.name in keep or t.name not in records))


def _reads(sides: tuple[CheckReport, ...]) -> dict[str, Optional[set[str]]]:
    """The files each target read on the base or the head (``None``: a run kept no record)."""
    records: dict[str, Optional[set[str]]] = {}
    for report in sides:
        for t in report.targets:
            have = records.get(t.name, set())
            records[t.name] = None if have is None or t.depends_on is None else have | set(t.depends_on)
    return records


def config_change(root: Path, base_sha: str, head_sha: str, config_name: Optional[str], scope: Config) -> str:
    """What the pull request changes in GraphMend's configuration, for a maintainer to accept by
    merging ("" when nothing): the gate itself never uses the head's file."""
    if config_name and Path(config_name).is_absolute():
        config_name = None  # the run's own file: compare the repository's
    base_name, base_text = _read_config(root, base_sha, config_name)
    head_name, head_text = _read_config(root, head_sha, config_name)
    if (base_name, base_text) == (head_name, head_text):
        return ""
    lead = "this pull request changes GraphMend's configuration"
    tail = "; the gate used the base branch's (merging accepts the change)"
    if head_name is None or head_text is None:
        return f"{lead}: it removes {base_name}{tail}"
    try:
        head = _parse_at(root, head_sha, head_name, head_text)
    except ConfigError as exc:
        return f"{lead}: its {head_name} is invalid ({exc}){tail}"
    base = dataclasses.replace(scope, root=root, file=None)
    keys = [f.name for f in dataclasses.fields(Config) if f.name not in ("root", "file")
            and getattr(base, f.name) != getattr(dataclasses.replace(head, root=root, file=None), f.name)]
    what = ", ".join(keys) if keys else "formatting only"
    return f"{lead}: {head_name} ({what}){tail}"


def analyse(
    root: Path | str,
    base: str,
    head: str,
    *,
    config_name: Optional[str] = None,
    cache_dir: Optional[Path] = None,
    bench: bool = False,
    progress: Progress = None,
    check_fn: Optional[Callable[..., CheckReport]] = None,
    propose_fixes: bool = True,
    allow_unsandboxed: bool = False,
    all_targets: bool = False,
    shard: Optional[tuple[int, int]] = None,
) -> PrResult:
    """Analyse ``head`` against ``base`` in the repository at ``root``; nothing is posted.

    Only the targets the pull request can affect run on the head (``graphmend.affected``); the
    others' base results are carried forward; ``all_targets`` runs every one. ``shard`` (i, n)
    analyses the i-th of n balanced shares and writes a partial review (``graphmend merge``)."""
    from bot import review as rv
    from bot.gate import compute_verdict

    from graphmend.check import check as real_check
    from graphmend.trees import tree_at

    check = check_fn or real_check
    began = time.monotonic()
    seconds: dict[str, float] = {}
    root = Path(root).resolve()
    base_sha, head_sha = resolve(root, base, "base"), resolve(root, head, "head")
    say = progress or (lambda _m: None)
    stages: list[rv.Stage] = []
    # One scope for both trees, the base branch's: a pull request that narrows its own
    # analysis (exclude its folder, drop the targets) is measured as the base decides.
    gate_config, accepted, problem = scope_config(root, base_sha, config_name)
    change = config_change(root, base_sha, head_sha, config_name, gate_config)
    stages.append(rv.Stage("config", True, "; ".join(x for x in (problem, change) if x)[:2000]))
    seconds["config"] = time.monotonic() - began

    refused: list[tuple[str, str]] = []  # the head's members that would be written outside the tree
    # Both commits exactly as committed: the head's .gitattributes (export-ignore, export-subst,
    # ident, eol) are the pull request's, and would make the code analysed differ from the code merged.
    with tree_at(root, head_sha, refused, as_committed=True) as head_tree, \
            tree_at(root, base_sha, as_committed=True) as base_tree:
        head_config = dataclasses.replace(gate_config, root=head_tree)
        base_config = dataclasses.replace(gate_config, root=base_tree)
        why = None if allow_unsandboxed else unsandboxed_reason(head_config)
        if why:
            raise PrError(UNSANDBOXED_REFUSAL.format(why=why))

        key = cache_key(base_sha, dataclasses.replace(base_config, root=Path(".")))
        entry = load_entry(cache_dir, key, say)
        names = [t.name for t in gate_config.targets]
        plan = None
        if shard is not None:
            durations = {n: (entry.target(n).duration_s if entry is not None and entry.target(n) else None) for n in names}
            plan = plan_shards(names, durations, shard[1])
            names = list(plan[shard[0] - 1])
            say(f"pr: shard {shard[0]}/{shard[1]}: {len(names)} of {len(gate_config.targets)} target(s)")
        try:
            changes = None if all_targets else changed_files(root, base_sha, head_sha)
        except RuntimeError as exc:
            raise PrError(str(exc)) from None
        pr_config = _head_config(root, head_sha, config_name)
        sides = run_sides(check=check, base_config=base_config, head_config=head_config,
                          pr_config=pr_config, changes=changes, names=names,
                          static=shard is None or shard[0] == 1, entry=entry,
                          store=lambda report, targets, static: store_entry(cache_dir, key, report, targets=targets,
                                                                            static=static, say=say), say=say)
        seconds.update(sides.seconds)
        base_report, head_report = sides.base, sides.head
        from_cache = len(sides.base_cached) == len(names) and (sides.static_cached or not (shard is None or shard[0] == 1))
        cache_state = ("off" if cache_dir is None else "hit" if from_cache else "partial" if sides.base_cached else "miss")
        stages.append(rv.Stage("base", True, "from the cache" if from_cache else
                               f"{len(sides.base_cached)} of {len(names)} target(s) from the cache" if sides.base_cached else ""))
        unaffected = [n for n, st in sides.status.items() if st == "unaffected"]
        stages.append(rv.Stage("check", True, f"{len(unaffected)} of {len(names)} target(s) unaffected by the pull request: "
                                              "their base results are carried forward" if unaffected else ""))
        # Fixes are verified on the targets that read the files they edit, this shard's or not
        # (the others' records from the base cache); they are benchmarked on this shard's.
        records: tuple[CheckReport, ...] = (base_report, head_report)
        unknown: tuple[str, ...] = ()
        if shard is not None:
            outside = outside_share(entry, [t.name for t in gate_config.targets], names, changes, base_config, pr_config)
            records, unknown = records + (CheckReport(targets=outside.carried),), outside.unknown

        matched = match(base_report, head_report)
        introduced = [b for s, b in matched if s == "introduced"]
        started = time.monotonic()
        if propose_fixes and unknown and introduced:
            fixes, declines, fix_stage = {}, {}, rv.Stage("fix", False, (
                f"not proposed: this shard holds no record of what {len(unknown)} target(s) of the other shards read "
                f"({', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}), and a fix is verified on every target "
                "that reads the files it edits (give the shards a base cache entry that holds every target, e.g. a "
                "cache folder they share, or run graphmend pr unsharded)"))
        elif propose_fixes:
            # The fix loop re-detects on the targets that read the files of the new breaks only.
            fixes, declines, fix_stage = _propose(_reading(head_config, records, {b.file for b in introduced}), introduced)
        else:
            fixes, declines, fix_stage = {}, {}, rv.Stage("fix", False, "fixes were not asked for (--no-fix)")
        stages.append(fix_stage)
        seconds["fix"] = time.monotonic() - started
        started = time.monotonic()
        reading = _reading(head_config, records, {e.file for fx in fixes.values() for e in fx.edits})
        if propose_fixes and fixes and head_config.targets and not reading.targets:
            verdicts, verify_stage = {}, rv.Stage("verify", False, "no target reads the files the fixes edit: they "
                                                                    "cannot be verified, so none is suggested")
        elif propose_fixes:
            verdicts, verify_stage = _verify(reading, fixes)
        else:
            verdicts, verify_stage = {}, rv.Stage("verify", False, "fixes were not asked for (--no-fix)")
        stages.append(verify_stage)
        passed = {fp: fx for fp, fx in fixes.items() if (verdicts.get(fp) or {}).get("ok")}
        seconds["verify"] = time.monotonic() - started
        started = time.monotonic()
        own = dataclasses.replace(reading, targets=tuple(t for t in reading.targets if t.name in set(names)))
        if bench and passed and reading.targets and not own.targets:
            benchmarks, bench_stage, withdrawn = {}, rv.Stage("bench", False, "the targets that read the fixed files are other shards'"), {}
        else:
            benchmarks, bench_stage, withdrawn = _bench(own, passed, bench, verdicts, progress=say, reads=_reads(records))
        for fp, why in withdrawn.items():  # made a target slower: shown with the reason, never suggested
            del fixes[fp]
            declines[fp] = why
        stages.append(bench_stage)
        seconds["bench"] = time.monotonic() - started

    findings = []
    for status, b in matched:
        fp = _fp(b)
        fix = fixes.get(fp) if status == "introduced" else None
        decline = None
        if status == "introduced" and fix is None:
            decline = declines.get(fp)
            if decline is None and b.fixable and not fix_stage.ran:
                decline = f"no fix was proposed: {fix_stage.reason}"
            elif decline is None and not b.fixable:
                decline = lever_text(b) or b.lever_reason or None  # the lever: a compile setting, or why none
        findings.append(rv.Finding(
            fingerprint=fp, status=status, file=b.file, line=b.line, reason=b.reason[:4000],
            baselined=fp in accepted,
            gb_id=b.gb_id if b.gb_id and re.fullmatch(r"GB\d{4}", b.gb_id) else None,
            category=b.category.value, rule=b.rule if b.rule and re.fullmatch(r"GM\d{3}", b.rule) else None,
            target=b.target, verified=b.verified,
            fix=_proposal(fix, verdicts.get(fp), verify_stage.reason) if fix is not None else None,
            decline=decline,
        ))
    targets = []
    for name in sorted({t.name for t in head_report.targets} | {t.name for t in base_report.targets}):
        bt = next((t for t in base_report.targets if t.name == name), None)
        ht = next((t for t in head_report.targets if t.name == name), None)
        targets.append(rv.TargetSummary(
            name=name,
            base=rv.Counts(bt.break_count, bt.graph_count, bt.error) if bt else None,
            head=rv.Counts(ht.break_count, ht.graph_count, ht.error) if ht else None,
            benchmark=benchmarks.get(name),
            status=sides.status.get(name), reason=sides.reasons.get(name, "")[:2000],
            duration_s=round(ht.duration_s, 3) if ht else None,
        ))
    seconds["total"] = time.monotonic() - began
    timing = rv.Timing(stages=tuple(rv.StageTime(k, round(v, 3)) for k, v in seconds.items()),
                       total_s=round(seconds["total"], 3), targets_analysed=len(names) - len(unaffected),
                       targets_unaffected=len(unaffected), base_targets_cached=len(sides.base_cached),
                       base_targets_run=len(names) - len(sides.base_cached), cache=cache_state)
    shard_info = (rv.Shard(shard[0], shard[1], config_digest(dataclasses.replace(gate_config, root=Path("."))), plan,
                           tuple(sorted(t.name for t in gate_config.targets))) if shard is not None else None)
    errors = tuple(rv.FileError(e.path, e.message[:2000]) for e in head_report.errors)
    errors += tuple(rv.FileError(path[:1000], why) for path, why in refused)
    # The policy is the base branch's: a pull request does not get to loosen it for itself.
    settings = rv.Settings(
        safety=gate_config.fix.safety,
        suggestions=gate_config.review.suggestions,
        comment=gate_config.review.comment,
        fail_on=gate_config.gate.fail_on,
    )
    review = rv.Review(base_sha=base_sha, head_sha=head_sha, settings=settings, stages=tuple(stages),
                       targets=tuple(targets), findings=tuple(findings), errors=errors, timing=timing, shard=shard_info)
    verdict = compute_verdict(review)
    review = dataclasses.replace(review, verdict="passed" if verdict.passed else "failed")
    return PrResult(review, verdict, from_cache)


def _propose(config: Config, introduced: list[GraphBreak]) -> tuple[dict[str, Fix], dict[str, str], Any]:
    """Fixes for the introduced breaks, by fingerprint, and the rules' declines."""
    from bot.review import Stage

    if not introduced:
        return {}, {}, Stage("fix", True, "no new breaks")
    try:
        from graphmend.fix import apply_fixes
    except ImportError as exc:
        return {}, {}, Stage("fix", False, f"the fix engine is not available: {exc}")
    files = sorted({b.file for b in introduced if not b.outside_paths})
    try:
        report = apply_fixes(config, paths=files, write=False, verify=False)  # verify_fixes below proves each fix
    except Exception as exc:  # noqa: BLE001 - the run goes on without fixes, and says why
        return {}, {}, Stage("fix", False, f"fix failed: {type(exc).__name__}: {exc}"[:2000])
    wanted = {_fp(b): b for b in introduced}
    by_site = {(b.file, b.line): fp for fp, b in wanted.items()}
    fixes: dict[str, Fix] = {}
    declines: dict[str, str] = {}
    # Applied fixes, and those proposed but held back (e.g. static candidates below the
    # safety threshold): both are shown; only verified ones can become suggestions.
    proposed = list(report.applied) + [s.fix for s in report.skipped]
    for fx in proposed:
        fp = fx.fingerprint if fx.fingerprint in wanted else by_site.get((fx.file, fx.line))
        if fp is None or fp in fixes:
            continue
        if not fx.edits:  # advice without a rewrite (e.g. what to add at the compile call site)
            declines.setdefault(fp, f"{fx.rule}: {fx.title}" + (f" ({fx.notes})" if fx.notes else ""))
            continue
        stale = _stale_edit(config.root, fx)
        if stale:
            # A later round of the fix loop edits text an earlier round produced: its line
            # numbers are not the head commit's, so it cannot be offered on the PR's lines.
            declines.setdefault(fp, f"{fx.rule}: {stale}")
            continue
        fixes[fp] = fx
    for d in report.declined:
        fp = d.fingerprint if d.fingerprint in wanted else by_site.get((d.file, d.line))
        if fp is not None:
            declines.setdefault(fp, f"{d.rule}: {d.reason}")
    return fixes, declines, Stage("fix", True, "")


def _stale_edit(root: Path, fix: Fix) -> str:
    """Why ``fix``'s edits do not apply to the files under ``root`` as they are, or ""."""
    for e in fix.edits:
        try:
            lines = split_lines(read_source(root, e.file))
        except SourceError:
            return f"{e.file} cannot be read"
        if e.end_line >= e.start_line and e.old_text and "".join(lines[e.start_line - 1 : e.end_line]) != e.old_text:
            return f"the fix's edit of {e.file}:{e.start_line} does not match the head commit's lines"
    return ""


def _verify(config: Config, fixes: dict[str, Fix]) -> tuple[dict[str, Any], Any]:
    """Verdicts keyed by the finding's fingerprint (the fix's own may differ)."""
    from bot.review import Stage

    if not fixes:
        return {}, Stage("verify", True, "no fixes to verify")
    if not config.targets:
        return {}, Stage("verify", False, "no targets configured: fixes cannot be verified, so none is suggested")
    try:
        from graphmend.verify import verify_fixes

        report = verify_fixes(config, list(fixes.values()))
    except Exception as exc:  # noqa: BLE001
        return {}, Stage("verify", False, f"verify failed: {type(exc).__name__}: {exc}"[:2000])
    before = sum(t.breaks_before or 0 for t in report.targets)
    after = sum(t.breaks_after or 0 for t in report.targets)
    max_error = max([t.max_abs_error_compiled for t in report.targets] + [0.0])
    by_fix = {}
    for v in report.fixes:
        entry = {"ok": v.ok, "reason": v.reason, "before": before, "after": after, "max_error": max_error}
        by_fix[v.fingerprint] = entry
        by_fix[(v.rule, v.file, v.line)] = entry
    out = {}
    for fp, fx in fixes.items():
        verdict = by_fix.get(fx.fingerprint) if fx.fingerprint else None
        verdict = verdict or by_fix.get((fx.rule, fx.file, fx.line))
        if verdict is not None:
            out[fp] = verdict
    return out, Stage("verify", True, "")


def _proposal(fix: Fix, verdict: Optional[dict], why_not: str = "") -> Any:
    from bot import review as rv

    if verdict is None:
        verification = rv.Verification("not-run", (why_not or "not verified")[:4000])
    else:
        verification = rv.Verification("passed" if verdict["ok"] else "failed", (verdict["reason"] or "")[:4000],
                                       verdict["max_error"], verdict["before"], verdict["after"])
    edits = tuple(rv.Edit(e.file, e.start_line, e.end_line, e.new_text, e.old_text) for e in fix.edits)
    # Whole files the fix needs (the one-time runtime module), once the Fix model carries them.
    files = tuple(rv.FileChange(w.path, "created" if w.action == "create" else "updated", w.text)
                  for w in getattr(fix, "files", ()) if w.action in ("create", "update"))
    return rv.FixProposal(fix.rule, fix.title[:500], fix.safety.value, edits, verification, None, files)


def _bench(config: Config, fixes: dict[str, Fix], enabled: bool, verdicts: dict[str, Any], progress: Progress = None,
           reads: Optional[dict[str, Optional[set[str]]]] = None) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """Cold start and steady state of the head tree before vs after its verified fixes (by
    fingerprint), and the fixes to withdraw because a target they reach got slower
    (``graphmend.bench.withdraw``; ``reads``: the files each target read)."""
    from bot import review as rv

    if not enabled:
        return {}, rv.Stage("bench", False, "bench is not enabled"), {}
    if not config.targets:
        return {}, rv.Stage("bench", False, "no targets configured"), {}
    if not fixes:
        return {}, rv.Stage("bench", False, "no verified fixes to benchmark"), {}
    try:
        from graphmend.bench import bench_fixes
        from graphmend.bench.withdraw import withdrawals

        report = bench_fixes(config, list(fixes.values()), progress=progress)
    except Exception as exc:  # noqa: BLE001 - the review goes on without numbers, and says why
        return {}, rv.Stage("bench", False, f"bench failed: {type(exc).__name__}: {exc}"[:2000]), {}
    max_error = max([v.get("max_error") or 0.0 for v in verdicts.values()] + [0.0])
    out = {}
    for t in report.targets:
        if t.error or not t.points:
            continue
        p = t.points[0]
        out[t.name] = rv.Benchmark(p.before.cold_start_s, p.after.cold_start_s, p.before.steady_s * 1000.0,
                                   p.after.steady_s * 1000.0, p.steady_ratio, max_error, speedup_ci=p.steady_ci,
                                   verdict=p.steady_verdict, cold_start_speedup=p.cold_start_ratio,
                                   cold_start_ci=p.cold_start_ci, cold_start_verdict=p.cold_start_verdict)
    withdrawn = withdrawals(report, fixes, reads or {})
    note = f"{len(withdrawn)} of {len(fixes)} fix(es) withdrawn: they made a target slower" if withdrawn else ""
    return out, rv.Stage("bench", True, note), withdrawn


def write_outputs(result: PrResult, out: Path, summary: Optional[Path]) -> None:
    from bot import render
    from bot.review import dump

    out.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(out, dump(result.review))
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(render.summary_markdown(result.review, result.verdict))
            fh.write(timing_markdown(result.review))


def timing_markdown(review: Any) -> str:
    """Where the time went, for the step summary: stages, targets run or carried forward, the cache."""
    t = review.timing
    if t is None:
        return ""
    from bot.render import escape as cell

    lines = ["", "#### Time", "",
             f"{t.total_s:.1f} s in all; {t.targets_analysed} target(s) analysed, {t.targets_unaffected} unaffected "
             f"(base results carried forward); base cache: {t.cache} ({t.base_targets_cached} target(s) from it, "
             f"{t.base_targets_run} run).", "",
             "| stage | seconds |", "| --- | ---: |"]
    lines += [f"| {cell(s.name)} | {s.seconds:.1f} |" for s in t.stages if s.name != "total"]
    ranked = sorted((x for x in review.targets if x.duration_s is not None), key=lambda x: -x.duration_s)
    if ranked:
        lines += ["", "| target | status | seconds |", "| --- | --- | ---: |"]
        lines += [f"| {cell(x.name)} | {cell(x.status or '')} | {x.duration_s:.1f} |" for x in ranked[:50]]
        if len(ranked) > 50:
            lines.append(f"| ... {len(ranked) - 50} more | | |")
    return "\n".join(lines) + "\n"
