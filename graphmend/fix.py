"""The fix loop behind ``graphmend fix``: detect, rewrite a copy, re-detect, repeat, write.

With targets (dynamic mode) Dynamo's own breaks are the ground truth: each break (file:line) is
routed to the rules that handle it, the fixes allowed by the safety threshold and
``select``/``ignore`` are applied to a COPY of the tree, the targets run again on the copy, and
this repeats until nothing changes (at most ``MAX_ROUNDS``). The loop never makes a target
worse: a round after which a target fails, or has more breaks, more graphs or more
recompilations than before, is rolled back (its fixes are reported as failed, with the reason). Then ``verify`` runs the
round's fixes together against the tree before the round (outputs, gradients-free, exceptions,
arguments written in place, module state, streams; eager and compiled) and, only when they
fail, splits them in halves down to the fixes that fail: those are withdrawn (reported, never
written), as are fixes that make a target recompile more often. Only then are the changed
files written to the real tree (or shown as a unified diff).

Without a target (static mode) the candidates come from reading the source; nothing was run, so
they are applied only with ``unsafe`` and are reported as unverified.

Files outside ``config.paths`` are never edited: their fixes are reported as a patch.
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from graphmend import fsutil
from graphmend.config import Config
from graphmend.model import SCHEMA_VERSION, Decline, FileError, Fix, GraphBreak, Safety, TargetResult
from graphmend.sources import read_source, split_lines
from graphmend.transforms.base import Failure, RuleContext, Suppressed
from graphmend.transforms.engine import FileResult, Skipped, fix_text, route_breaks

MAX_ROUNDS = 4

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FileChange:
    """One file's rewrite: the unified diff, and whether it was written to the tree."""

    file: str
    diff: str
    fixes: tuple[str, ...] = ()  # rule codes applied, in order
    written: bool = False
    outside_paths: bool = False
    new_file: bool = False  # a file the fixes add (the package's runtime copy)


@dataclass(frozen=True)
class TargetSummary:
    """A target's breaks and graphs before and after the fixes (dynamic mode)."""

    name: str
    breaks_before: int = 0
    breaks_after: int = 0
    graphs_before: int = 0
    graphs_after: int = 0
    error: Optional[str] = None
    recompiles_before: int = 0
    recompiles_after: int = 0


@dataclass(frozen=True)
class FixReport:
    """What ``graphmend fix`` did. JSON shape: schemas/fix.schema.json."""

    mode: str  # "dynamic" | "static"
    verified: bool  # True when every applied fix was re-detected on a target
    threshold: Safety = Safety.SAFE
    rounds: int = 0
    targets: tuple[TargetSummary, ...] = ()
    applied: tuple[Fix, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    declined: tuple[Decline, ...] = ()
    failed: tuple[Failure, ...] = ()
    suppressed: tuple[Suppressed, ...] = ()
    withdrawn: tuple[Failure, ...] = ()  # fixes verify found to change the program (never written)
    rolled_back: tuple[str, ...] = ()  # "round N: why" for each round undone
    changes: tuple[FileChange, ...] = ()
    patches: tuple[FileChange, ...] = ()  # fixes in files outside `paths`, never applied
    remaining: tuple[GraphBreak, ...] = ()  # breaks left after the fixes
    found: tuple[GraphBreak, ...] = ()  # breaks detected before any fix
    errors: tuple[FileError, ...] = ()
    written: bool = False
    version: int = SCHEMA_VERSION

    @property
    def failed_run(self) -> bool:
        return bool(self.errors) or bool(self.failed) or any(t.error for t in self.targets)

    @property
    def exit_code(self) -> int:
        """0 when nothing is left to fix; 1 when findings remain or anything failed."""
        return 1 if self.failed_run or self.remaining else 0


def apply_fixes(
    config: Config,
    paths: Optional[Sequence[str]] = None,
    target_names: Optional[Sequence[str]] = None,
    *,
    unsafe: bool = False,
    write: bool = True,
    progress: Optional[Progress] = None,
    runner: object = None,
    verify: bool = True,
) -> FixReport:
    """Fix what can be fixed; see the module docstring. ``paths`` narrows the files edited.
    ``verify=False`` skips running ``verify`` on each round (breaks are still re-detected)."""
    threshold = Safety.UNSAFE if unsafe or config.fix.safety == "unsafe" else Safety.SAFE
    if target_names or (config.targets and target_names is None):
        return _dynamic(config, paths, target_names, threshold, write, progress, runner, verify)
    return _static(config, paths, threshold, write, progress)


# ------------------------------------------------------------------------------------------


def _say(progress: Optional[Progress], message: str) -> None:
    if progress:
        progress(message)


def _wanted(rel: str, paths: Optional[Sequence[str]]) -> bool:
    if not paths:
        return True
    rel = rel.replace("\\", "/")
    for p in paths:
        p = p.replace("\\", "/").strip("/")
        if p in ("", ".") or rel == p or rel.startswith(p + "/"):
            return True
    return False


def _diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(split_lines(old), split_lines(new),
                                        fromfile=f"a/{rel}", tofile=f"b/{rel}"))


def _rules(config: Config):
    from graphmend.transforms.registry import selected_rules

    return selected_rules(config.fix.select, config.fix.ignore)


def rule_context(config: Config, threshold: Safety, file: str, targets: Sequence = (), verified: bool = False) -> RuleContext:
    """The context the rules see for ``file``: the safety threshold, the selection, and the device
    and dtype of the targets that reach it."""
    devices = {t.device for t in targets}
    dtypes = {t.dtype for t in targets}
    # A site reached from several targets gets the strictest device: a CUDA assert is fatal.
    device = "cuda" if "cuda" in devices else ("cpu" if devices == {"cpu"} else (None if not devices else "auto"))
    return RuleContext(file=file, threshold=threshold, select=config.fix.select, ignore=config.fix.ignore,
                       device=device, dtype=dtypes.pop() if len(dtypes) == 1 else None, verified=verified,
                       runtime=_runtime_spot(config, file))


def _runtime_spot(config: Config, file: str):
    """Where ``file``'s runtime copy is, read in the real tree (so a fix says what writing it does
    there), or None for a file outside any package."""
    from graphmend.transforms._runtime_copy import locate

    if Path(file).is_absolute() or file.startswith("<"):
        return None
    return locate(Path(config.root), file, getattr(config.fix, "runtime", None))


def _runtime_files(fixes: Sequence[Fix]):
    from graphmend.model import files_needed

    return files_needed(fixes)


def _put_runtime(root: Path, fixes: Sequence[Fix]) -> None:
    """The runtime copies ``fixes`` need, written into the working copy ``root`` so the targets run
    the rewritten files (never reported: the real tree is written at the end)."""
    for f in _runtime_files(fixes):
        target = root / f.path
        if not (target.is_file() and target.read_text(encoding="utf-8", errors="replace") == f.text):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f.text, encoding="utf-8")


def _runtime_changes(config: Config, fixes: Sequence[Fix], write: bool) -> tuple[list[FileChange], list[FileError]]:
    """The runtime copies the applied fixes need, as changes of the report (a new file's diff is
    against /dev/null), written to the real tree atomically when ``write``."""
    from graphmend.transforms._runtime_copy import write_files

    changes, errors = [], []
    for f in _runtime_files(fixes):
        if f.action == "unchanged":
            continue
        rules = tuple(dict.fromkeys(x.rule for x in fixes if f in x.files))
        old = f.old_text if f.action == "update" else ""
        diff = "".join(difflib.unified_diff(split_lines(old), split_lines(f.text),
                                            fromfile="/dev/null" if f.action == "create" else f"a/{f.path}",
                                            tofile=f"b/{f.path}"))
        written = False
        if write:
            try:
                write_files(Path(config.root), [f])  # nothing to do when an earlier call wrote it
                written = True
            except (OSError, ValueError) as exc:
                errors.append(FileError(f.path, str(exc)))
                continue
        changes.append(FileChange(f.path, diff, rules, written=written, new_file=f.action == "create"))
    return changes, errors


def _group(breaks: Iterable[GraphBreak]) -> dict[str, list[GraphBreak]]:
    by_file: dict[str, list[GraphBreak]] = {}
    for b in breaks:
        by_file.setdefault(b.file, []).append(b)
    return by_file


def _read(root: Path, rel: str) -> str:
    from graphmend.sources import read_source

    return read_source(root, rel)


def fix_file(root: Path, rel: str, breaks: Sequence[GraphBreak], ctx: RuleContext, rules,
             context: Sequence[GraphBreak] = ()) -> FileResult:
    """What the rules do to one file of ``root`` for these breaks (nothing is written): the one
    answer to "would rule R fix this break", shared by the fix loop and ``check``'s labels.
    ``context``: every break of the same runs (any file), for the frames Dynamo skipped."""
    import dataclasses

    from graphmend.sources import SourceError

    try:
        text = _read(root, rel)
    except SourceError as exc:
        return FileResult(rel, "", "", error=str(exc))
    lines = route_breaks(breaks, rules)
    from graphmend.model import Category

    reached = tuple(sorted({(f.line, f"{b.file}:{b.line}") for b in context if b.category is Category.SIDE_EFFECT
                            and b.file != rel for f in b.stack[:-1] if f.file == rel}))
    ctx = dataclasses.replace(ctx, root=str(root), stacks=tuple((b.line, b.stack) for b in breaks if b.stack),
                              reached=reached)
    result = fix_text(rel, text, ctx, rules, lines)
    # A skip whose own break is fixed here goes away with it: it makes nothing else moot.
    moot = _eager_anyway(rel, text, breaks, context, fixed={f.line for f in result.applied})
    if not moot:
        return result
    result = fix_text(rel, text, ctx, rules, {code: wanted - set(moot) for code, wanted in lines.items()})
    declines = tuple(Decline(code, rel, line, moot[line]) for code, wanted in sorted(lines.items())
                     for line in sorted(wanted & set(moot)))
    return dataclasses.replace(result, declined=result.declined + declines)


def _eager_anyway(rel: str, text: str, breaks: Sequence[GraphBreak], context: Sequence[GraphBreak],
                  fixed: set[int]) -> dict[int, str]:
    """line -> why, for the breaks of ``rel`` after which Dynamo runs the rest of their function
    eagerly anyway: the function's frame resumed at that break is skipped because of another
    break further on (one inside a loop cannot be resumed) that is not fixed too (``fixed``: the
    lines of ``rel`` the rules fix; a cause in another file counts as not fixed). Removing such a
    break gains no graph: Dynamo would then skip the function from its previous break (or its
    start) instead, running more of it eagerly, and any helper a rewrite adds would be compiled
    as frames of their own."""
    import ast

    from graphmend.detect.dynamic import skipped_frame
    from graphmend.model import Category

    skips = [(k, frame) for k in context
             if (frame := skipped_frame(k)) and frame[1] == rel and not (k.file == rel and k.line in fixed)]
    if not skips:
        return {}
    try:
        defs = [n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    except (SyntaxError, ValueError):
        return {}

    def enclosing(line: int):
        inside = [d for d in defs if d.lineno <= line <= (d.end_lineno or d.lineno)]
        return max(inside, key=lambda d: d.lineno) if inside else None

    causes = {(k.file, k.line) for k, _ in skips}
    moot: dict[int, str] = {}
    for b in breaks:
        if b.category is Category.SKIPPED_FRAME or (b.file, b.line) in causes:
            continue  # a break that itself makes Dynamo skip a frame: removing it can help
        func = enclosing(b.line)
        for k, (name, _, first) in skips:
            if func is None or name != func.name or k.target != b.target or enclosing(first) is not func:
                continue
            cause = f"the break at {k.file}:{k.line} ({k.gb_type}), which it cannot resume from"
            if first == b.line:
                moot[b.line] = (f"Dynamo runs {name}() eagerly from here on anyway: it skips the frame because of {cause}; "
                                f"without this break it would skip {name}() from an earlier point, so no graph is gained: "
                                "fix that break first")
            elif first == func.lineno:
                moot[b.line] = (f"Dynamo runs all of {name}() eagerly anyway: it skips the frame because of {cause}; "
                                "removing this break gains no graph: fix that break first")
    return moot


# ------------------------------------------------------------------------------------------
# Dynamic mode


def _dynamic(config, paths, target_names, threshold, write, progress, runner, verify=True) -> FixReport:
    from graphmend.detect.dynamic import detect_targets

    names = list(target_names) if target_names else [t.name for t in config.targets]
    targets = [config.target(n) for n in names]  # ConfigError for an unknown name
    rules = _rules(config)
    tmp = Path(tempfile.mkdtemp(prefix="graphmend-fix-"))
    try:
        from graphmend.trees import copy_tree

        copy = copy_tree(config.root, tmp / "tree")
        _say(progress, "detecting breaks on the targets")
        before = detect_targets(config, names, root=copy, runner=runner)
        current = before
        originals: dict[str, str] = {}
        applied: list[Fix] = []
        failed: list[Failure] = []
        declined: dict[tuple, Decline] = {}
        skipped: dict[tuple, Skipped] = {}
        suppressed: dict[tuple, Suppressed] = {}
        errors: list[FileError] = []
        patches: dict[str, FileChange] = {}
        withdrawn: dict[str, Failure] = {}  # by fingerprint: not proposed again in later rounds
        rolled_back: list[str] = []
        rounds = 0
        for rounds in range(1, MAX_ROUNDS + 1):
            breaks = [b for t in current if not t.error for b in t.breaks]
            changed: dict[str, str] = {}  # rel -> text before this round
            round_fixes: list[Fix] = []
            for rel, file_breaks in sorted(_group(breaks).items()):
                if Path(rel).is_absolute() or rel.startswith("<") or not _wanted(rel, paths):
                    continue  # outside the repository (a library): nothing to edit
                ctx = rule_context(config, threshold, rel, targets, verified=True)
                result = fix_file(copy, rel, file_breaks, ctx, rules, context=breaks)
                if result.error:
                    errors.append(FileError(rel, result.error))
                    continue
                for d in result.declined:
                    declined[(d.file, d.line, d.rule)] = d
                for s in result.skipped:
                    skipped[(s.fix.file, s.fix.line, s.fix.rule)] = s
                for s in result.suppressed:
                    suppressed[(s.file, s.line, s.rule)] = s
                failed.extend(result.failed)
                fixes = [f for f in result.applied if f.fingerprint not in withdrawn]
                text = result.text if len(fixes) == len(result.applied) else _apply(result.original, fixes)
                if text == result.original:
                    continue
                if not config.is_in_paths(rel):
                    # Never edited: the fix goes to the report as a patch.
                    patches.setdefault(rel, FileChange(rel, _diff(rel, result.original, text),
                                                       tuple(f.rule for f in fixes), outside_paths=True))
                    continue
                originals.setdefault(rel, result.original)
                changed[rel] = result.original
                (copy / rel).write_text(text, encoding="utf-8")
                _put_runtime(copy, fixes)
                round_fixes.extend(fixes)
            if not changed:
                break
            _say(progress, f"round {rounds}: {len(round_fixes)} fix(es) applied; re-detecting")
            after = detect_targets(config, names, root=copy, runner=runner)
            regressed = _regressed(current, after)
            suspects = _suspects(current, after, round_fixes) if regressed else []
            if suspects and len(suspects) < len(round_fixes):
                # Take back only the fixes in the files the worse targets traced, and look again.
                keep = [f for f in round_fixes if f not in suspects]
                for rel, old in changed.items():
                    (copy / rel).write_text(_apply(old, [f for f in keep if f.file == rel]), encoding="utf-8")
                retry = detect_targets(config, names, root=copy, runner=runner)
                if not _regressed(current, retry):
                    for f in suspects:
                        withdrawn[f.fingerprint] = Failure(f.rule, f.file, f.line, f"rolled back: {regressed}")
                    rolled_back.append(f"round {rounds}: {regressed}; only its {len(suspects)} fix(es) in the files that "
                                       f"target ran through were taken back ({len(keep)} kept)")
                    _say(progress, rolled_back[-1])
                    round_fixes, after, regressed = keep, retry, ""
            if not regressed and verify:
                kept, lost = _verify_round(config, _affected(names, current, after, changed), copy, changed, round_fixes,
                                           tmp / f"round{rounds}", runner, progress)
                for f, why in lost:
                    withdrawn[f.fingerprint] = Failure(f.rule, f.file, f.line, f"withdrawn: {why}")
                if lost:
                    for rel, old in changed.items():
                        (copy / rel).write_text(_apply(old, [f for f in kept if f.file == rel]), encoding="utf-8")
                    round_fixes = kept
                    if not kept:
                        continue  # the tree is as before the round; the withdrawn fixes are not proposed again
                    after = detect_targets(config, names, root=copy, runner=runner)
                    regressed = _regressed(current, after)
            if regressed:
                for rel, old in changed.items():
                    (copy / rel).write_text(old, encoding="utf-8")
                rolled_back.append(f"round {rounds}: {regressed}")
                _say(progress, f"round {rounds} rolled back: {regressed}")
                failed.extend(Failure(f.rule, f.file, f.line, f"rolled back: {regressed}") for f in round_fixes)
                break
            applied.extend(round_fixes)
            for f in round_fixes:  # a site that got fixed is no longer skipped/declined
                skipped.pop((f.file, f.line, f.rule), None)
            current = after
        # The runtime copies first: a rewritten file is never written without the module it imports.
        runtime_changes, runtime_errors = _runtime_changes(config, applied, write)
        errors.extend(runtime_errors)
        write = write and not runtime_errors
        changes = []
        for rel, old in sorted(originals.items()):
            new = read_source(copy, rel)  # as written: CRLF stays CRLF
            if new == old:
                continue
            written = False
            if write:
                fsutil.write_text(config.root / rel, new)
                written = True
            changes.append(FileChange(rel, _diff(rel, old, new), tuple(f.rule for f in applied if f.file == rel), written=written))
        changes.extend(runtime_changes)
        summaries = tuple(
            TargetSummary(name=b.name, breaks_before=b.break_count, breaks_after=a.break_count,
                          graphs_before=b.graph_count, graphs_after=a.graph_count, error=a.error or b.error,
                          recompiles_before=b.recompiles, recompiles_after=a.recompiles)
            for b, a in zip(before, current)
        )
        from graphmend.check import why_left

        # What is left says why, as `check` would: the rules' declines on the rewritten copy,
        # not the classification's untried lever (a setting GM501 just declined, say).
        remaining = why_left(config, [b for t in current for b in t.breaks], targets, root=copy)
        live = {(b.file, b.line) for b in remaining}
        return FixReport(
            mode="dynamic",
            verified=True,
            threshold=threshold,
            rounds=rounds,
            targets=summaries,
            applied=tuple(applied),
            skipped=tuple(v for k, v in sorted(skipped.items())),
            declined=tuple(v for k, v in sorted(declined.items()) if _still_there(v, live, applied)),
            failed=tuple(failed),
            suppressed=tuple(v for _, v in sorted(suppressed.items())),
            withdrawn=tuple(sorted(withdrawn.values(), key=lambda w: (w.file, w.line, w.rule))),
            rolled_back=tuple(rolled_back),
            changes=tuple(changes),
            patches=tuple(v for _, v in sorted(patches.items())),
            remaining=remaining,
            found=tuple(b for t in before for b in t.breaks),
            errors=tuple(errors),
            written=write and bool(changes),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _still_there(d: Decline, live: set, applied: Sequence[Fix]) -> bool:
    return not any(f.file == d.file and f.line == d.line for f in applied)


def _regressions(before: Sequence[TargetResult], after: Sequence[TargetResult]) -> list[tuple[str, str]]:
    """(target, why) for each target a round made worse: it now fails, or has more breaks, more
    graphs or more recompilations than before (fewer breaks but more graphs, as a rewrite that
    moves a break into a loop gives, is not an improvement; nor is one graph that Dynamo must
    compile again for each value a Python number used to take)."""
    worse = []
    for b, a in zip(before, after):
        if a.error and not b.error:
            worse.append((a.name, f"target {a.name} failed after the rewrite: {a.error.splitlines()[0] if a.error else ''}"))
        elif a.error or b.error:
            continue
        elif a.break_count > b.break_count:
            worse.append((a.name, f"target {a.name} has more breaks after the rewrite ({b.break_count} -> {a.break_count})"))
        # -1: a frame was skipped, the count is unknown
        elif a.graph_count >= 0 and b.graph_count >= 0 and a.graph_count > b.graph_count:
            worse.append((a.name, f"target {a.name} has more graphs after the rewrite ({b.graph_count} -> "
                                  f"{a.graph_count}, breaks {b.break_count} -> {a.break_count})"))
        elif a.recompiles > b.recompiles:
            worse.append((a.name, f"target {a.name} recompiles more after the rewrite ({b.recompiles} -> {a.recompiles} "
                                  f"recompilations, graphs {b.graph_count} -> {a.graph_count})"))
    return worse


def _regressed(before: Sequence[TargetResult], after: Sequence[TargetResult]) -> str:
    """Why a round must be undone (the first target it made worse), or "" when none."""
    worse = _regressions(before, after)
    return worse[0][1] if worse else ""


def _suspects(before: Sequence[TargetResult], after: Sequence[TargetResult], fixes: Sequence[Fix]) -> list[Fix]:
    """The round's fixes in files that the targets it made worse ran through: the ones to take
    back first, so one target's regression does not cost every other target its fixes."""
    worse = {name for name, _ in _regressions(before, after)}
    traced = {f for t in (*before, *after) if t.name in worse for f in t.traced_files}
    return [f for f in fixes if f.file in traced]


def _apply(text: str, fixes: Sequence[Fix]) -> str:
    from graphmend.transforms.engine import apply_edits

    return apply_edits(text, [e for f in fixes for e in f.edits])


def _affected(names: Sequence[str], before: Sequence[TargetResult], after: Sequence[TargetResult],
              changed: dict[str, str]) -> list[str]:
    """The targets that ran through a file the round changed (Dynamo traced it, before or after):
    the others run the same code on both trees, so verifying them proves nothing new."""
    touched = {t.name for t in (*before, *after) if set(t.traced_files) & set(changed)}
    return [n for n in names if n in touched] or list(names)


def _verify_round(config, names, copy: Path, changed: dict[str, str], fixes: Sequence[Fix], base: Path, runner,
                  progress) -> tuple[list[Fix], list[tuple[Fix, str]]]:
    """Run ``verify`` on a round's fixes against the tree before the round: (kept, withdrawn
    with the reason). The fixes' edits are in the line numbers of that tree."""
    from graphmend.verify import parent

    shutil.copytree(copy, base)
    for rel, old in changed.items():
        (base / rel).write_text(old, encoding="utf-8")
    _say(progress, f"verifying {len(fixes)} fix(es) before writing")
    try:
        report = parent.verify_edits(config, base, list(fixes), names, runner=runner, progress=progress)
    except Exception as exc:  # noqa: BLE001 - a fix that cannot be verified is not written
        reason = f"could not verify: {type(exc).__name__}: {exc}".splitlines()[0]
        return [], [(f, reason) for f in fixes]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    kept = [f for f, v in zip(fixes, report.fixes) if v.ok]
    lost = [(f, f"verify: {v.reason}") for f, v in zip(fixes, report.fixes) if not v.ok]
    return kept, lost


# ------------------------------------------------------------------------------------------
# Static mode


def _static(config, paths, threshold, write, progress) -> FixReport:
    from graphmend.detect.static import detect_static

    _say(progress, "reading the source for static candidates")
    found = detect_static(config, list(paths) if paths else None)
    rules = _rules(config)
    changes, applied, skipped, declined, failed, suppressed = [], [], [], [], [], []
    remaining: list[GraphBreak] = []
    errors = list(found.errors)
    by_file = _group(found.breaks)
    for rel, file_breaks in sorted(by_file.items()):
        ctx = rule_context(config, threshold, rel, verified=False)
        result = fix_file(config.root, rel, file_breaks, ctx, rules)
        if result.error:
            errors.append(FileError(rel, result.error))
            remaining.extend(file_breaks)
            continue
        declined.extend(result.declined)
        failed.extend(result.failed)
        suppressed.extend(result.suppressed)
        skipped.extend(result.skipped)
        if threshold is not Safety.UNSAFE:
            # Nothing was run: a static candidate is applied only when unsafe fixes are allowed.
            skipped.extend(Skipped(f, "unverified static candidate: run with --target, or apply with --unsafe-fixes")
                           for f in result.applied)
            remaining.extend(file_breaks)
            continue
        applied.extend(result.applied)
        fixed_lines = {f.line for f in result.applied}
        remaining.extend(b for b in file_breaks if b.line not in fixed_lines)
        if result.changed:
            written = False
            if write and config.is_in_paths(rel):
                try:  # the runtime copy first: a rewritten file never goes without the module it imports
                    from graphmend.transforms._runtime_copy import write_files

                    write_files(Path(config.root), _runtime_files(result.applied))
                except (OSError, ValueError) as exc:
                    errors.append(FileError(rel, f"not written: {exc}"))
                else:
                    fsutil.write_text(config.root / rel, result.text)
                    written = True
            changes.append(FileChange(rel, _diff(rel, result.original, result.text),
                                      tuple(f.rule for f in result.applied), written=written))
    if applied:
        in_paths = [f for f in applied if config.is_in_paths(f.file)]
        runtime_changes, runtime_errors = _runtime_changes(config, in_paths, write)
        changes.extend(runtime_changes)
        errors.extend(runtime_errors)
    return FixReport(
        mode="static",
        verified=False,
        threshold=threshold,
        rounds=1,
        applied=tuple(applied),
        skipped=tuple(skipped),
        declined=tuple(declined),
        failed=tuple(failed),
        suppressed=tuple(suppressed),
        changes=tuple(changes),
        remaining=tuple(remaining),
        found=tuple(found.breaks),
        errors=tuple(errors),
        written=write and any(c.written for c in changes),
    )


__all__ = ["FileChange", "FixReport", "TargetSummary", "apply_fixes", "fix_file", "rule_context", "MAX_ROUNDS"]
