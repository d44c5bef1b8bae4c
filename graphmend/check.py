"""``check()``: dynamic detection on the targets plus static candidates for everything else.

Dynamic findings are the ground truth; static detection only covers files no target's run
traced (a file Dynamo ran through has already told us the truth about it), and never reports
a candidate at a site a dynamic break already reports. A ``# graphmend: ignore[...]`` comment
on a break's line silences a dynamic break as it silences a static one, so the gate (``pr``)
and every report leave it out alike.

A label is a promise. The classification table only says which rule *handles* a kind of break;
whether that rule fixes *this* break depends on the source around it. So every break is labelled
by running the rules' legality analyses on it, through the fix loop's own ``fix_file`` at the
configured safety: ``fixable`` (with the rule) only when a rule produces a fix that ``fix`` would
apply, otherwise the rules' decline reasons. A compile-setting lever (GM5xx) is advised only
after a second run of the target with the setting in force showed fewer breaks, this one gone,
and no error; otherwise the advice says what that run showed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from graphmend.config import Config
from graphmend.model import CheckReport, FileError, GraphBreak, Lever, Safety, TargetResult

# The compile settings a lever may propose (classify.CONFIG_SETTINGS), in the wording of advice.
_SETTING_PREFIX = "torch._dynamo.config."


def check(
    config: Config,
    paths: Optional[Iterable[str]] = None,
    target_names: Optional[Iterable[str]] = None,
    *,
    static: bool = True,
    dynamic: bool = True,
    progress: Any = None,
    runner: Any = None,
    try_levers: bool = True,
) -> CheckReport:
    """Find graph breaks. ``paths`` (repo-relative or absolute) narrow the static pass.

    ``try_levers`` runs a target again with a proposed compile setting in force before advising
    it (one more worker run per target and setting); without it no setting is advised.
    """
    names = list(target_names or [])
    if names:
        for name in names:
            config.target(name)  # an unknown name is a usage error before anything runs
    targets: tuple[TargetResult, ...] = ()
    if dynamic and config.targets:
        from graphmend.detect.dynamic import detect_targets

        targets = detect_targets(config, names or None, runner=runner, progress=progress)
        targets = tuple(_without_suppressed(config.root, t) for t in targets)
        ran = [config.target(t.name) for t in targets]
        targets = tuple(_labelled_target(t, label_breaks(config, t.breaks, ran, verified=True)) for t in targets)
        targets = _with_levers(config, targets, runner=runner, try_levers=try_levers)

    static_breaks: tuple[GraphBreak, ...] = ()
    errors: tuple[FileError, ...] = ()
    if static:
        from graphmend.detect.static import detect_static

        # Static reads every selected file (a compiled region in one file is found through the
        # classes of the others), then keeps only what dynamic detection could not have seen.
        result = detect_static(config, files=list(paths) if paths else None)
        traced = {f for t in targets if not t.error for f in t.traced_files}
        dynamic_sites = {(b.file, b.line) for t in targets for b in t.breaks}
        static_breaks = tuple(
            b for b in result.breaks if b.file not in traced and (b.file, b.line) not in dynamic_sites
        )
        static_breaks = tuple(_untried_lever(b) for b in label_breaks(config, static_breaks, (), verified=False))
        errors = tuple(result.errors)
    return CheckReport(targets=targets, static=static_breaks, errors=errors)


def _without_suppressed(root: Path, target: TargetResult) -> TargetResult:
    """``target`` without the breaks whose line (as it is in the repository) carries a
    suppression comment for the break's rule; the break count drops by as many."""
    from graphmend.sources import SourceError, line_text, read_source, split_lines, suppressed

    lines: dict[str, list[str]] = {}

    def line_of(b: GraphBreak) -> str:
        if b.file.startswith(("/", "../")):
            return b.source_line
        if b.file not in lines:
            try:
                lines[b.file] = [line_text(line) for line in split_lines(read_source(root, b.file))]
            except SourceError:
                lines[b.file] = []
        file_lines = lines[b.file]
        return file_lines[b.line - 1] if 0 < b.line <= len(file_lines) else b.source_line

    kept = tuple(b for b in target.breaks if not suppressed(line_of(b), b.rule))
    if len(kept) == len(target.breaks):
        return target
    dropped = len(target.breaks) - len(kept)
    return dataclasses.replace(target, breaks=kept, break_count=max(0, target.break_count - dropped))

def unmatched_paths(config: Config) -> list[str]:
    """The entries of ``config.paths`` under which no Python file may be checked or rewritten
    (a typo, or a layout ``graphmend init`` guessed wrong): each makes ``check`` silently small."""
    from graphmend.sources import iter_python_files

    missing = []
    for start in config.paths:
        try:
            files = iter_python_files(config.root, start)
        except (OSError, ValueError):
            files = []
        if not any(config.is_in_paths(rel) for rel in files):
            missing.append(start)
    return missing


# ------------------------------------------------------------------------------------------
# Labels: what the rules would really do at each break


def label_breaks(config: Config, breaks: Sequence[GraphBreak], targets: Sequence = (), *,
                 verified: bool, root: Optional[Path] = None) -> tuple[GraphBreak, ...]:
    """``breaks`` with ``fixable``/``rule``/``lever``/``lever_reason`` set from what the rules do
    to each one at ``config.fix.safety``: the fix loop's ``fix_file`` on the same breaks of the
    same file, with the same rule context (``targets``: the target configs that ran)."""
    from graphmend.fix import fix_file, rule_context
    from graphmend.transforms.engine import route_breaks
    from graphmend.transforms.registry import selected_rules

    root = Path(root or config.root)
    threshold = Safety.UNSAFE if config.fix.safety == "unsafe" else Safety.SAFE
    rules = selected_rules(config.fix.select, config.fix.ignore)
    by_file: dict[str, list[GraphBreak]] = {}
    for b in breaks:
        by_file.setdefault(b.file, []).append(b)
    labelled: dict[int, GraphBreak] = {}
    for rel, file_breaks in by_file.items():
        if Path(rel).is_absolute() or rel.startswith("<") or rel.startswith("../"):
            for b in file_breaks:
                labelled[id(b)] = _not_fixable(b, "the break is in a file outside the repository, which GraphMend never edits")
            continue
        routed = route_breaks(file_breaks, rules)
        if not any(routed.values()):
            continue  # no rule handles these breaks: the classification's reason stands
        result = fix_file(root, rel, file_breaks, rule_context(config, threshold, rel, targets, verified=verified), rules,
                          context=breaks)
        for b in file_breaks:
            # Asked per break: two breaks on one line (a break and the frame it made Dynamo
            # skip) may go to different rules.
            alone = route_breaks([b], rules)
            candidates = [r.code for r in rules if alone[r.code]]
            if candidates:
                labelled[id(b)] = _label(config, b, candidates, result)
    return tuple(labelled.get(id(b), b) for b in breaks)


def why_left(config: Config, breaks: Sequence[GraphBreak], targets: Sequence = (), *, root: Path) -> tuple[GraphBreak, ...]:
    """The breaks ``fix`` left in the tree at ``root``, each with the rules' reasons for leaving it.

    A break a rule would still fix is returned as it was: its round was rolled back or failed,
    and the fix report says so; only declines replace the classification's untried lever."""
    labelled = label_breaks(config, breaks, targets, verified=True, root=root)
    return tuple(b if new.fixable else new for b, new in zip(breaks, labelled))


def _label(config: Config, b: GraphBreak, candidates: list[str], result: Any) -> GraphBreak:
    if result.error:
        return _not_fixable(b, f"the file could not be read: {result.error}")
    at = [f for f in result.applied if f.line == b.line and f.rule in candidates]
    later = [s.fix for s in result.skipped if s.fix.line == b.line and s.fix.rule in candidates and s.reason.startswith("overlaps")]
    fixes = at or later  # a fix that overlaps another one is applied by the fix loop's next round
    if fixes:
        code = sorted(fixes, key=lambda f: candidates.index(f.rule))[0].rule
        if not config.is_in_paths(b.file):
            return _not_fixable(b, f"{code} would fix it, but {b.file} is outside `paths`: `fix` only reports the patch", rule=code)
        why = b.lever_reason if b.rule == code else f"{code} rewrites this site exactly"
        return dataclasses.replace(b, fixable=True, rule=code, lever=Lever.RULE, lever_reason=why)
    reasons: list[str] = []
    declined: dict[str, list[str]] = {}  # reason -> the rules that gave it
    for d in result.declined:
        if d.line == b.line and d.rule in candidates:
            declined.setdefault(d.reason, []).append(d.rule)
    reasons.extend(f"{', '.join(dict.fromkeys(codes))} declined: {why}" for why, codes in declined.items())
    lever = None
    for s in result.skipped:
        if s.fix.line == b.line and s.fix.rule in candidates:
            if s.fix.safety is Safety.DISPLAY_ONLY and not s.fix.edits:
                lever = s.fix  # a compile setting with nothing to edit here: the run decides
            else:
                reasons.append(f"{s.fix.rule}: {s.reason}")
    for f in result.failed:
        if f.line == b.line and f.rule in candidates:
            reasons.append(f"{f.rule} failed on this site: {f.error}")
    for s in result.suppressed:
        if s.line == b.line and s.rule in candidates:
            reasons.append(f"{s.rule} suppressed by a `# graphmend: ignore` comment")
    if b.lever is Lever.CONFIG and (lever is not None or not reasons):
        # The setting is still a candidate; a run of the target decides (``_with_levers``).
        return dataclasses.replace(b, fixable=False, lever_reason=_join(reasons + [b.lever_reason]))
    if not reasons:
        reasons.append(f"{', '.join(candidates)} produced no fix for this site")
    return _not_fixable(b, _join(reasons))


def _join(reasons: list[str]) -> str:
    return "; ".join(dict.fromkeys(r.rstrip(".") for r in reasons if r))


def _not_fixable(b: GraphBreak, why: str, rule: Optional[str] = None) -> GraphBreak:
    return dataclasses.replace(b, fixable=False, rule=rule or b.rule, lever=Lever.NONE, lever_reason=why)


def _labelled_target(t: TargetResult, breaks: tuple[GraphBreak, ...]) -> TargetResult:
    return dataclasses.replace(t, breaks=breaks)


def _setting_of(b: GraphBreak) -> Optional[str]:
    from graphmend.detect.classify import config_setting

    return config_setting(b.lever_reason) if b.lever is Lever.CONFIG else None


def _untried_lever(b: GraphBreak) -> GraphBreak:
    """A static candidate's compile setting has not been run: it is a hint, never advice."""
    setting = _setting_of(b)
    if setting is None:
        return b
    return dataclasses.replace(b, lever=Lever.NONE, lever_reason=_join([
        _without_setting(b.lever_reason, setting), f"{setting} might remove it, untried: no target runs this file"]))


# ------------------------------------------------------------------------------------------
# Levers: a compile setting is advised only once a run with it in force showed it helps


def _with_levers(config: Config, targets: tuple[TargetResult, ...], *, runner: Any, try_levers: bool) -> tuple[TargetResult, ...]:
    from graphmend.detect.dynamic import detect_targets

    out = []
    for t in targets:
        wanted = sorted({s for b in t.breaks if not t.error and (s := _setting_of(b))})
        if not wanted:
            out.append(t)
            continue
        target = config.target(t.name)
        outcome: dict[str, str] = {}  # setting -> why it is not advised ("" when it helped)
        trials: dict[str, Optional[TargetResult]] = {}
        for setting in wanted:
            if setting in target.dynamo_config:
                outcome[setting] = f"{setting} is already in force (the target's dynamo_config) and this break remains"
                continue
            if not try_levers:
                outcome[setting] = f"{setting} might remove it, untried"
                continue
            trial_config = dataclasses.replace(config, targets=tuple(
                dataclasses.replace(c, dynamo_config=c.dynamo_config + (setting,)) if c.name == t.name else c
                for c in config.targets))
            trials[setting] = detect_targets(trial_config, [t.name], runner=runner)[0]
        breaks = []
        for b in t.breaks:
            setting = _setting_of(b)
            if setting is None:
                breaks.append(b)
                continue
            why = outcome.get(setting)
            if why is None:
                why = _trial_verdict(setting, t, b, trials[setting])
            if why:
                breaks.append(dataclasses.replace(b, lever=Lever.NONE, lever_reason=_join([_without_setting(b.lever_reason, setting), why])))
            else:
                trial = trials[setting]
                breaks.append(dataclasses.replace(b, lever_reason=_join([
                    _without_setting(b.lever_reason, setting),
                    f"{_SETTING_PREFIX}{setting} = True (tried on target {t.name}: {t.break_count} -> {trial.break_count} breaks, "
                    f"{t.graph_count} -> {trial.graph_count} graphs)"])))
        out.append(dataclasses.replace(t, breaks=tuple(breaks)))
    return tuple(out)


def _without_setting(reason: str, setting: str) -> str:
    """The reason without the untried advice (it is replaced by what the run showed)."""
    return reason.replace(f"{_SETTING_PREFIX}{setting} = True", "").strip().rstrip(";").strip()


def _site(b: GraphBreak) -> tuple:
    return (b.file, b.line, b.category, b.gb_type)


def _trial_verdict(setting: str, before: TargetResult, b: GraphBreak, trial: TargetResult) -> str:
    """'' when the run with ``setting`` helped with ``b``; otherwise what the run showed."""
    if trial.error:
        return f"{setting} tried: the target failed with it: {_first_line(trial.error)}"
    if _site(b) in {_site(x) for x in trial.breaks}:
        return f"{setting} tried: this break remains ({before.break_count} -> {trial.break_count} breaks)"
    if trial.break_count >= before.break_count:
        return f"{setting} tried: no fewer breaks ({before.break_count} -> {trial.break_count})"
    return ""


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
