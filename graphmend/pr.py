"""``graphmend pr``: analyse a pull request and write ``review.json`` (it never posts).

The base and head commits come from the event payload (``pull_request.base.sha`` and
``.head.sha``; not ``GITHUB_SHA``, which is the merge commit GitHub made, whose line numbers
do not match the pull request's diff) or from ``--base`` / ``--head``. Both trees are
written out with ``git archive`` and analysed with the *base*'s configuration (``scope_config``),
so the two sides are measured the same way and a pull request cannot narrow the analysis that
gates it; a change it makes to the configuration is reported beside the result (the "config"
stage) for a maintainer to accept by merging. The base's results are cached by base SHA (and a
digest of the configuration and versions) so that repeated runs on one pull request do not run
the base's targets again.

Breaks are matched by fingerprint into introduced / fixed by the PR / unchanged. The gate's
settings and the baseline are read from the *base* commit too: a pull request cannot accept
its own breaks, or switch the gate off, by editing them. Fixes are proposed and verified for the
introduced breaks only. A stage that cannot run is recorded in review.json with the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from graphmend import __version__, fsutil
from graphmend.config import CONFIG_NAMES, Config, ConfigError, load_config, load_yaml, parse_config
from graphmend.model import CheckReport, Fix, GraphBreak, fingerprint, from_dict, to_dict
from graphmend.report import lever_text
from graphmend.runner import unsandboxed_reason

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
# The base's results, cached by SHA


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphmend" / "base"


def _torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(base_sha: str, config: Config) -> str:
    """The base SHA plus what else changes its results: the analysis config and the versions."""
    settings = to_dict(dataclasses.replace(config, root=Path("."), file=None))
    blob = json.dumps([settings, __version__, _torch_version()], sort_keys=True, default=str)
    return f"{base_sha}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def load_cached(cache_dir: Optional[Path], key: str) -> Optional[CheckReport]:
    if cache_dir is None:
        return None
    path = cache_dir / f"{key}.json"
    try:
        return from_dict(CheckReport, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or unreadable: run the base again


def store_cached(cache_dir: Optional[Path], key: str, report: CheckReport) -> None:
    if cache_dir is None or report.failed:
        return  # never cache a run that crashed: the next one may succeed
    cache_dir.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(cache_dir / f"{key}.json", json.dumps(to_dict(report)))


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
    return sorted(out, key=lambda sv: (sv[1].file, sv[1].line, sv[0], _fp(sv[1])))


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
        config = dataclasses.replace(config, sandbox=load_config(root, run_file).sandbox)
    baseline_text = _git_show(root, base_sha, config.gate.baseline)
    accepted: frozenset[str] = frozenset()
    if baseline_text:
        try:
            accepted = baseline_fingerprints(baseline_text)
        except ValueError:
            accepted = frozenset()
    return config, accepted, problem


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
) -> PrResult:
    """Analyse ``head`` against ``base`` in the repository at ``root``; nothing is posted."""
    from bot import review as rv
    from bot.gate import compute_verdict

    from graphmend.check import check as real_check
    from graphmend.trees import tree_at

    check = check_fn or real_check
    root = Path(root).resolve()
    base_sha, head_sha = resolve(root, base, "base"), resolve(root, head, "head")
    say = progress or (lambda _m: None)
    stages: list[rv.Stage] = []
    # One scope for both trees, the base branch's: a pull request that narrows its own
    # analysis (exclude its folder, drop the targets) is measured as the base decides.
    gate_config, accepted, problem = scope_config(root, base_sha, config_name)
    change = config_change(root, base_sha, head_sha, config_name, gate_config)
    stages.append(rv.Stage("config", True, "; ".join(x for x in (problem, change) if x)[:2000]))

    refused: list[tuple[str, str]] = []  # the head's members that git archive would write outside the tree
    with tree_at(root, head_sha, refused) as head_tree, tree_at(root, base_sha) as base_tree:
        head_config = dataclasses.replace(gate_config, root=head_tree)
        base_config = dataclasses.replace(gate_config, root=base_tree)
        why = None if allow_unsandboxed else unsandboxed_reason(head_config)
        if why:
            raise PrError(UNSANDBOXED_REFUSAL.format(why=why))

        say(f"pr: analysing head {head_sha[:7]}")
        head_report = check(head_config)
        key = cache_key(base_sha, dataclasses.replace(base_config, root=Path(".")))
        base_report = load_cached(cache_dir, key)
        from_cache = base_report is not None
        if base_report is None:
            say(f"pr: analysing base {base_sha[:7]}")
            base_report = check(base_config)
            store_cached(cache_dir, key, base_report)
        stages.append(rv.Stage("base", True, "from the cache" if from_cache else ""))
        stages.append(rv.Stage("check", True, ""))

        matched = match(base_report, head_report)
        introduced = [b for s, b in matched if s == "introduced"]
        if propose_fixes:
            fixes, declines, fix_stage = _propose(head_config, introduced)
        else:
            fixes, declines, fix_stage = {}, {}, rv.Stage("fix", False, "fixes were not asked for (--no-fix)")
        stages.append(fix_stage)
        if propose_fixes:
            verdicts, verify_stage = _verify(head_config, fixes)
        else:
            verdicts, verify_stage = {}, rv.Stage("verify", False, "fixes were not asked for (--no-fix)")
        stages.append(verify_stage)
        passed = [fx for fp, fx in fixes.items() if (verdicts.get(fp) or {}).get("ok")]
        benchmarks, bench_stage = _bench(head_config, passed, bench, verdicts, progress=say)
        stages.append(bench_stage)

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
        ))
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
                       targets=tuple(targets), findings=tuple(findings), errors=errors)
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
            lines = (root / e.file).read_text(encoding="utf-8").splitlines(keepends=True)
        except (OSError, UnicodeDecodeError):
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


def _bench(config: Config, fixes: list[Fix], enabled: bool, verdicts: dict[str, Any], progress: Progress = None) -> tuple[dict[str, Any], Any]:
    """Cold start and steady state of the head tree before vs after its verified fixes."""
    from bot import review as rv

    if not enabled:
        return {}, rv.Stage("bench", False, "bench is not enabled")
    if not config.targets:
        return {}, rv.Stage("bench", False, "no targets configured")
    if not fixes:
        return {}, rv.Stage("bench", False, "no verified fixes to benchmark")
    try:
        from graphmend.bench import bench_fixes

        report = bench_fixes(config, fixes, progress=progress)
    except Exception as exc:  # noqa: BLE001 - the review goes on without numbers, and says why
        return {}, rv.Stage("bench", False, f"bench failed: {type(exc).__name__}: {exc}"[:2000])
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
    return out, rv.Stage("bench", True, "")


def write_outputs(result: PrResult, out: Path, summary: Optional[Path]) -> None:
    from bot import render
    from bot.review import dump

    out.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(out, dump(result.review))
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(render.summary_markdown(result.review, result.verdict))
