"""The parent side of ``verify``: run both trees in workers, compare, decide per fix.

``verify(config, ...)`` compares the tree at ``base`` ("before") with the working tree
("after"). ``verify_fixes(config, fixes, ...)`` compares the working tree with private copies
of it that have candidate fixes applied, each fix alone and then all those that passed
together; a fix that fails is withdrawn (it is neither applied by ``fix`` nor suggested).
A variant is not run on a target whose "before" arm read none of the files the variant changes
(the workers record what they read; ``graphmend.affected.why_changes_reach`` decides): that
target's verdict is ``unaffected``, with the reason.

Each arm runs in its own worker process (``graphmend.verify.worker``), through the configured
runner (a subprocess, or a container). The "before" arm writes its weights and inputs into
its scratch folder and the parent copies them into the "after" arm's, so both see the same
numbers. Cases that raise are re-run alone in throwaway processes: an exception may leave
state behind, and on CUDA a failed device assertion poisons the whole process.

torch is imported lazily (the parent needs it only to load the workers' tensors).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from graphmend.affected import Change, why_changes_reach
from graphmend.config import Config, ConfigError, TargetConfig
from graphmend.model import Environment, Fix, TargetResult
from graphmend.runner import Job, Runner, get_runner
from graphmend.runner.channel import ChannelError, copy_file, work_folder
from graphmend.trees import apply_fixes_to_tree, changed_files, copy_tree, tree_at
from graphmend.verify.compare import ArmData, compare_arms, load_tensors
from graphmend.verify.results import FixVerdict, Mismatch, TargetVerification, VerifyReport
from graphmend.verify.worker import INPUTS_IN, INPUTS_OUT, OUTPUTS, STATE_IN, STATE_OUT

Progress = Optional[Callable[[str], None]]
SEED = 1234


def select_targets(config: Config, names: Optional[Iterable[str]]) -> list[TargetConfig]:
    """The configured targets named (all when ``names`` is None); unknown names are an error."""
    if not names:
        return list(config.targets)
    return [config.target(n) for n in names]


def job_device(target: TargetConfig) -> str:
    """What a container runner should pass through: GPUs only for cuda (or auto with a GPU)."""
    if target.device == "cuda":
        return "cuda"
    if target.device == "auto" and shutil.which("nvidia-smi"):
        return "cuda"
    return "cpu"


def _say(progress: Progress, message: str) -> None:
    if progress is not None:
        progress(message)


class _ArmRunner:
    """Runs one tree's verify worker(s) for one target and gathers the results."""

    def __init__(self, config: Config, target: TargetConfig, runner: Runner, grad: bool, workdir: Path):
        self.config, self.target, self.runner, self.grad, self.workdir = config, target, runner, grad, workdir
        self.device = job_device(target)
        self._count = 0

    def _scratch(self, name: str) -> Path:
        self._count += 1
        path = self.workdir / f"{self._count:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def _job(self, root: Path, scratch: Path, label: str, **payload: Any) -> Any:
        body = {
            "target": dataclasses.asdict(self.target),
            "seed": SEED,
            "grad": self.grad,
            # On CUDA an exception may have poisoned the process; stop and start a new one.
            "stop_on_error": self.device == "cuda",
            **payload,
        }
        job = Job(task="verify", payload=body, root=Path(root), timeout_s=self.config.timeout_for(self.target),
                  scratch=scratch, device=self.device, label=f"target {self.target.name} ({label})")
        return self.runner.run(job)

    def run(self, root: Path, label: str, feed: Optional[Path]) -> tuple[Optional[ArmData], Optional[str], Optional[Path], dict]:
        """All cases of one tree. ``feed``: the scratch of the "before" arm to take weights and
        inputs from (None for the "before" arm itself, which writes them)."""
        data = ArmData(root=Path(root), cases={})
        wanted: Optional[list[int]] = None
        first_scratch: Optional[Path] = None
        info: dict = {}
        while True:
            scratch = self._scratch(label)
            first_scratch = first_scratch or scratch
            try:
                if feed is not None:
                    _feed(feed, scratch)
                if feed is None and wanted is not None:
                    _feed(first_scratch, scratch)
            except ValueError as exc:
                return None, f"{label}: {exc}", first_scratch, info
            extra = {"save_state": True, "save_inputs": True} if feed is None and wanted is None else {"load_state": feed is not None}
            if feed is None and wanted is not None:
                extra = {"load_state": True}
            # The original runs each case twice eagerly: its own nondeterminism is the baseline.
            extra["repeat"] = feed is None
            result = self._job(root, scratch, label, cases=wanted, **extra)
            if not result.ok:
                return None, f"{label}: {result.error}", first_scratch, info
            payload = result.data or {}
            info = _with_reads(info, payload) if info else payload
            for case in payload.get("cases", []):
                data.cases[case["index"]] = case
            try:
                data.tensors.update(load_tensors(scratch / OUTPUTS))
            except ValueError as exc:
                return None, f"{label}: {exc}", first_scratch, info
            stopped = payload.get("stopped_at")
            total = payload.get("case_count", 0)
            if stopped is None or stopped + 1 >= total:
                break
            wanted = list(range(stopped + 1, total))
        return data, None, first_scratch, info

    def rerun_failing(self, data: ArmData, root: Path, label: str, feed: Path, indices: Sequence[int]) -> Optional[str]:
        """Each failing case alone in a throwaway process; its result replaces the first one."""
        modes_sets = [["eager"], ["compiled"]] if self.device == "cuda" else [["eager", "compiled"]]
        for index in indices:
            for modes in modes_sets:
                scratch = self._scratch(f"{label}-case{index}")
                try:
                    _feed(feed, scratch)
                except ValueError as exc:
                    return f"{label}: case {index}: {exc}"
                # The original's repeated eager run is redone from the same fresh state.
                result = self._job(root, scratch, f"{label}, case {index}", cases=[index], modes=modes, load_state=True,
                                   stop_on_error=False, repeat=label == "before")
                if not result.ok:
                    return f"{label}: case {index}: {result.error}"
                ran: set[str] = set()
                for case in (result.data or {}).get("cases", []):
                    data.cases.setdefault(case["index"], case)["modes"].update(case["modes"])
                    ran |= set(case["modes"])
                try:
                    fresh = load_tensors(scratch / OUTPUTS)
                except ValueError as exc:
                    return f"{label}: case {index}: {exc}"
                for mode in ran:
                    prefix = f"{index}/{mode}/"
                    for key in [k for k in data.tensors if k.startswith(prefix)]:
                        del data.tensors[key]
                data.tensors.update(fresh)
        return None


def _feed(source: Path, scratch: Path) -> None:
    """Hand the "before" arm's weights and inputs to another worker's scratch folder; a file the
    channel refuses (a symlink, a FIFO, too large) is ``ValueError``: that arm's error."""
    for src, dst in ((STATE_OUT, STATE_IN), (INPUTS_OUT, INPUTS_IN)):
        # Written by the worker: never followed as a symlink, read as a regular file under a cap.
        try:
            copy_file(source, src, scratch, dst)
        except ChannelError as exc:
            raise ValueError(f"{src}: {exc}") from None


def _with_reads(info: dict, later: dict) -> dict:
    """``info`` (an arm's first job) with the files a later job of the same arm read added: the
    record vouches for the arm only when every job's record is complete."""
    first, more = info.get("reads"), later.get("reads")
    if not (isinstance(first, dict) and isinstance(more, dict)):
        return dict(info, reads=None)
    files = first.get("files"), more.get("files")
    if not all(isinstance(f, list) for f in files):
        return dict(info, reads=None)
    return dict(info, reads={"files": sorted(set(files[0]) | set(files[1])),
                             "complete": first.get("complete") is True and more.get("complete") is True})


def _depends_on(info: dict) -> Optional[frozenset[str]]:
    """The repository files an arm read, from its workers' claim checked at the channel; None
    when the claim is missing, incomplete or malformed (then it vouches for nothing)."""
    from graphmend.runner.channel import repo_paths

    reads = info.get("reads")
    if not isinstance(reads, dict) or reads.get("complete") is not True:
        return None
    files = repo_paths(reads.get("files"))
    return None if files is None else frozenset(files)


def _failing(data: ArmData) -> set[int]:
    return {i for i, case in data.cases.items() if any(not o.get("ok") for o in case["modes"].values())}


@dataclasses.dataclass
class _Before:
    """The "before" arm of one target, run once and reused for every variant of the tree."""

    data: Optional[ArmData]
    error: Optional[str]
    scratch: Optional[Path]
    info: dict
    rerun: set[int] = dataclasses.field(default_factory=set)

    @property
    def depends_on(self) -> Optional[frozenset[str]]:
        return _depends_on(self.info)


def _environment(info: dict, target: TargetConfig) -> Environment:
    env = info.get("environment") or {}
    return Environment(
        torch_version=env.get("torch_version", ""), device=env.get("device", target.device), dtype=env.get("dtype", target.dtype),
        backend=env.get("backend", target.backend), mode=env.get("mode", target.mode), python_version=env.get("python_version", ""),
    )


def _run_before(arms: _ArmRunner, root: Path) -> _Before:
    data, error, scratch, info = arms.run(root, "before", None)
    return _Before(data, error, scratch, info)


def _verify_target(arms: _ArmRunner, before: _Before, after_root: Path, after_label: str = "after") -> TargetVerification:
    """Compare one variant of the tree against the (cached) "before" arm."""
    target = arms.target
    started = time.monotonic()
    if before.error or before.data is None or before.scratch is None:
        return TargetVerification(name=target.name, ok=False, error=before.error or "before: no result")
    after, error, _, info = arms.run(after_root, after_label, before.scratch)
    env = _environment(info or before.info, target)
    if error or after is None:
        return TargetVerification(name=target.name, ok=False, error=error, environment=env, duration_s=time.monotonic() - started)
    failing = sorted(_failing(before.data) | _failing(after))
    new_for_before = [i for i in failing if i not in before.rerun]
    if new_for_before:
        problem = arms.rerun_failing(before.data, before.data.root, "before", before.scratch, new_for_before)
        if problem:
            return TargetVerification(name=target.name, ok=False, error=problem, environment=env)
        before.rerun.update(new_for_before)
    if failing:
        problem = arms.rerun_failing(after, after_root, after_label, before.scratch, failing)
        if problem:
            return TargetVerification(name=target.name, ok=False, error=problem, environment=env)
    comparison = compare_arms(before.data, after, rtol=target.rtol, atol=target.atol)
    mismatches, eager_stats, compiled_stats = comparison.mismatches, comparison.eager, comparison.compiled
    state = (info or {}).get("state") or {}
    for key, what in (("missing", "missing from"), ("unexpected", "not in"), ("shape_mismatch", "with another shape in")):
        if state.get(key):
            mismatches.insert(0, Mismatch("state", "eager", "", f"state_dict keys {what} the original: {', '.join(state[key][:5])}"))
    return TargetVerification(
        name=target.name,
        ok=not mismatches,
        cases=len(before.data.cases),
        failing_cases=len(failing),
        graphs_before=before.info.get("graph_count"),
        graphs_after=(info or {}).get("graph_count"),
        recompiles_before=before.info.get("recompiles"),
        recompiles_after=(info or {}).get("recompiles"),
        max_abs_error_eager=eager_stats.max_abs,
        max_rel_error_eager=eager_stats.max_rel,
        max_abs_error_compiled=compiled_stats.max_abs,
        max_rel_error_compiled=compiled_stats.max_rel,
        mismatches=tuple(mismatches),
        baseline=tuple(comparison.baseline),
        baseline_spread_eager=comparison.spread_eager,
        baseline_spread_compiled=comparison.spread_compiled,
        environment=env,
        duration_s=time.monotonic() - started,
    )


def tree_changes(root: Path, tree: Path) -> tuple[Change, ...]:
    """What makes ``tree`` (a copy of ``root`` with fixes applied) differ from ``root``, file by file."""
    out = []
    for rel in changed_files(root, tree):
        a, b = Path(root) / rel, tree / rel
        there, here = a.is_symlink() or a.exists(), b.is_symlink() or b.exists()
        status = "A" if not there else "D" if not here else "T" if a.is_symlink() != b.is_symlink() else "M"
        out.append(Change(status, rel))
    return tuple(out)


def _unaffected(config: Config, arms: _ArmRunner, before: _Before, changes: tuple[Change, ...]) -> Optional[TargetVerification]:
    """The verdict of a target the changes cannot reach, without running it: its "before" arm read
    none of the files they change and they add, remove or retype no module it may import
    (``graphmend.affected.why_changes_reach``). None when it must run."""
    if before.error or before.data is None or why_changes_reach(before.depends_on, changes, config):
        return None
    graphs, recompiles = before.info.get("graph_count"), before.info.get("recompiles")
    return TargetVerification(
        name=arms.target.name, ok=True, cases=len(before.data.cases), graphs_before=graphs, graphs_after=graphs,
        recompiles_before=recompiles, recompiles_after=recompiles, environment=_environment(before.info, arms.target),
        unaffected=f"not run: it reads none of {', '.join(c.path for c in changes[:5])}"
                   f"{' …' if len(changes) > 5 else ''}, which the change edits")


def _verify_variant(config: Config, arms: _ArmRunner, before: _Before, tree: Path, label: str,
                    changes: tuple[Change, ...]) -> TargetVerification:
    """One target on one variant of the tree: not run when the changes cannot reach it."""
    return _unaffected(config, arms, before, changes) or _verify_target(arms, before, tree, label)


def _with_breaks(config: Config, results: list[TargetVerification], before_root: Path, after_root: Path, progress: Progress) -> list[TargetVerification]:
    """Graphs and breaks before -> after from dynamic detection, when it is available.

    Without it the graph counts of the verify workers' compiled runs stay (they count every
    graph compiled for all the cases, recompilations included) and the break counts stay None.
    A target the change cannot reach (``unaffected``) is detected once: its counts after are
    those before.
    """
    names = [r.name for r in results if r.error is None]
    if not names:
        return results
    try:
        from graphmend.detect.dynamic import detect_targets
    except ImportError:
        return results
    _say(progress, "verify: counting graphs and breaks before and after")
    try:
        before = {t.name: t for t in detect_targets(config, names, root=before_root)}
        reached = [r.name for r in results if r.error is None and not r.unaffected]
        after = {t.name: t for t in detect_targets(config, reached, root=after_root)} if reached else {}
        after.update({r.name: before[r.name] for r in results if r.unaffected and r.name in before})
    except Exception as exc:  # noqa: BLE001 - counting is extra information; the verdict stands
        _say(progress, f"verify: counting breaks failed: {type(exc).__name__}: {exc}")
        return results
    out = []
    for r in results:
        b: Optional[TargetResult] = before.get(r.name)
        a: Optional[TargetResult] = after.get(r.name)
        changes: dict[str, Any] = {}
        if b is not None and not b.error:
            changes.update(graphs_before=b.graph_count, breaks_before=b.break_count)
        if a is not None and not a.error:
            changes.update(graphs_after=a.graph_count, breaks_after=a.break_count)
        out.append(dataclasses.replace(r, **changes))
    return out


def verify(config: Config, target_names: Optional[Iterable[str]] = None, *, base: str = "HEAD", grad: bool = False,
           runner: Optional[Runner] = None, progress: Progress = None, count_breaks: bool = True,
           run_unchanged: bool = False) -> VerifyReport:
    """Prove the working tree computes what the tree at ``base`` computes, target by target.

    The two trees are compared first: when they hold the same bytes there is no source change
    and nothing runs (``run_unchanged`` runs the targets anyway, a check of verify itself).
    """
    targets = select_targets(config, target_names)
    results: list[TargetVerification] = []
    with tree_at(config.root, base) as before_root, work_folder("graphmend-verify-") as work:
        changed = tuple(changed_files(before_root, config.root))
        if not changed:
            _say(progress, f"verify: no source change: the working tree is identical to {base}")
            if not run_unchanged:
                return VerifyReport(base=base, grad=grad, source_changed=False)
        runner = runner or get_runner(config)
        for target in targets:
            _say(progress, f"verify: {target.name}: running the tree at {base} and the working tree")
            arms = _ArmRunner(config, target, runner, grad, Path(work) / target.name)
            before = _run_before(arms, before_root)
            result = _verify_target(arms, before, config.root)
            _say(progress, f"verify: {target.name}: {'equivalent' if result.ok else 'DIFFERENT' if not result.error else 'error'}")
            results.append(result)
        if count_breaks:
            results = _with_breaks(config, results, before_root, config.root, progress)
    return VerifyReport(base=base, targets=tuple(results), grad=grad, source_changed=bool(changed), changed_files=changed)


# --------------------------------------------------------------------------------------------
# Fixes


def _summary(result: TargetVerification) -> str:
    if result.error:
        return f"{result.name}: could not run: {result.error}"
    m = result.mismatches[0]
    where = f" on {m.case}" if m.case else ""
    return f"{result.name}: {m.kind} differs ({m.check}){where}: {m.detail}"


def verify_fixes(config: Config, fixes: Sequence[Fix], target_names: Optional[Iterable[str]] = None, *, grad: bool = False,
                 runner: Optional[Runner] = None, progress: Progress = None, count_breaks: bool = True) -> VerifyReport:
    """Verify each fix alone and those that pass together, on copies of the working tree.

    The report's ``targets`` describe the tree with every passing fix applied (or with none
    when none passed); ``fixes`` has a verdict per fix. A fix passing alone but failing
    together with the others is withdrawn with them: which one is to blame is not known, and
    suggesting a combination that was never shown equivalent would not be sound.
    """
    targets = select_targets(config, target_names)
    if not targets:
        raise ConfigError(config.display_file, "targets", "at least one target to verify fixes on", "<none configured>")
    runner = runner or get_runner(config)
    verdicts: dict[int, FixVerdict] = {}
    final: list[TargetVerification] = []
    with work_folder("graphmend-fixes-") as work_s:
        work = Path(work_s)
        arms = {t.name: _ArmRunner(config, t, runner, grad, work / "runs" / t.name) for t in targets}
        _say(progress, "verify: running the unfixed tree")
        before = {name: _run_before(a, config.root) for name, a in arms.items()}

        def check(variant: str, chosen: Sequence[Fix]) -> tuple[Optional[str], list[TargetVerification], Optional[Path]]:
            tree = work / "trees" / variant
            copy_tree(config.root, tree)
            try:
                apply_fixes_to_tree(tree, chosen)
            except Exception as exc:  # noqa: BLE001 - EditConflict, a missing file: the fix does not apply
                return f"does not apply: {exc}", [], None
            changes = tree_changes(config.root, tree)
            results = [_verify_variant(config, arms[t.name], before[t.name], tree, variant, changes) for t in targets]
            bad = [r for r in results if not r.ok]
            return (_summary(bad[0]) if bad else None), results, tree

        alone: dict[int, tuple[list[TargetVerification], Optional[Path]]] = {}
        for i, fix in enumerate(fixes):
            _say(progress, f"verify: fix {i + 1}/{len(fixes)} ({fix.rule} at {fix.file}:{fix.line}) alone")
            problem, results, tree = check(f"fix{i}", [fix])
            alone[i] = (results, tree)
            verdicts[i] = FixVerdict(fingerprint=fix.fingerprint, rule=fix.rule, file=fix.file, line=fix.line,
                                     ok=problem is None, alone=problem is None, reason=problem or "")
        passing = [i for i in verdicts if verdicts[i].ok]
        final_tree: Optional[Path] = None
        if len(passing) > 1:
            _say(progress, f"verify: the {len(passing)} passing fixes together")
            problem, final, final_tree = check("together", [fixes[i] for i in passing])
            for i in passing:
                verdicts[i] = dataclasses.replace(verdicts[i], together=problem is None, ok=problem is None,
                                                  reason="" if problem is None else f"fails together with the other fixes: {problem}")
            if problem is not None:
                final, final_tree = [], None
        elif len(passing) == 1:
            final, final_tree = alone[passing[0]]
        if not final:
            # Nothing passed: what would be applied is the unfixed tree itself.
            final = [TargetVerification(name=t.name, ok=before[t.name].error is None, error=before[t.name].error,
                                        cases=len(before[t.name].data.cases) if before[t.name].data else 0,
                                        environment=_environment(before[t.name].info, t)) for t in targets]
            final_tree = config.root
        if count_breaks and final_tree is not None:
            final = _with_breaks(config, final, config.root, final_tree, progress)
    return VerifyReport(base="working tree", targets=tuple(final), fixes=tuple(verdicts[i] for i in sorted(verdicts)), grad=grad)


def verify_edits(config: Config, base_root: Path, fixes: Sequence[Fix], target_names: Optional[Iterable[str]] = None, *,
                 grad: bool = False, runner: Optional[Runner] = None, progress: Progress = None) -> VerifyReport:
    """The fix loop's check before it writes: ``fixes`` (edits in the line numbers of the tree at
    ``base_root``) verified together on a copy of that tree; only when they fail together are
    they split in halves, down to the fixes that fail, which are withdrawn.

    A fix also fails when the targets compile more often with it (more recompilations than
    the tree at ``base_root``). The report's ``targets`` describe the tree with the kept fixes
    (or ``base_root`` itself when none is kept); ``fixes`` has a verdict per fix, in order.
    """
    targets = select_targets(config, target_names)
    runner = runner or get_runner(config)
    verdicts: dict[int, FixVerdict] = {}
    with work_folder("graphmend-round-") as work_s:
        work = Path(work_s)
        arms = {t.name: _ArmRunner(config, t, runner, grad, work / "runs" / t.name) for t in targets}
        before = {name: _run_before(a, base_root) for name, a in arms.items()}
        runs = 0

        def check(chosen: Sequence[int]) -> tuple[Optional[str], list[TargetVerification]]:
            nonlocal runs
            runs += 1
            tree = work / "trees" / f"v{runs}"
            copy_tree(base_root, tree)
            try:
                apply_fixes_to_tree(tree, [fixes[i] for i in chosen])
            except Exception as exc:  # noqa: BLE001 - EditConflict, a missing file: the fixes do not apply
                return f"does not apply: {exc}", []
            changes = tree_changes(base_root, tree)
            results = [_verify_variant(config, arms[t.name], before[t.name], tree, f"v{runs}", changes) for t in targets]
            bad = [r for r in results if not r.ok]
            if bad:
                return _summary(bad[0]), results
            for r in results:
                if (r.recompiles_after or 0) > (r.recompiles_before or 0):
                    return f"{r.name}: more recompilations ({r.recompiles_before} -> {r.recompiles_after})", results
            return None, results

        def settle(group: list[int]) -> tuple[list[int], list[TargetVerification]]:
            _say(progress, f"verify: {len(group)} fix(es) together" if len(group) > 1 else
                 f"verify: {fixes[group[0]].rule} at {fixes[group[0]].file}:{fixes[group[0]].line}")
            problem, results = check(group)
            if problem is None:
                for i in group:
                    verdicts[i] = FixVerdict(fixes[i].fingerprint, fixes[i].rule, fixes[i].file, fixes[i].line, ok=True,
                                             alone=len(group) == 1, together=None if len(group) == 1 else True)
                return group, results
            if len(group) == 1:
                i = group[0]
                verdicts[i] = FixVerdict(fixes[i].fingerprint, fixes[i].rule, fixes[i].file, fixes[i].line, ok=False,
                                         alone=False, reason=problem)
                return [], results
            half = len(group) // 2
            left, left_results = settle(group[:half])
            right, right_results = settle(group[half:])
            if not left or not right:
                return (left, left_results) if left else (right, right_results)
            kept = left + right
            problem, results = check(kept)
            if problem is not None:  # each half passes, not both: which is to blame is not known
                for i in kept:
                    verdicts[i] = dataclasses.replace(verdicts[i], ok=False, together=False,
                                                      reason=f"fails together with the other fixes: {problem}")
                return [], results
            return kept, results

        kept, final = settle(list(range(len(fixes)))) if fixes else ([], [])
        if not kept:
            final = [TargetVerification(name=t.name, ok=before[t.name].error is None, error=before[t.name].error,
                                        cases=len(before[t.name].data.cases) if before[t.name].data else 0,
                                        environment=_environment(before[t.name].info, t)) for t in targets]
    return VerifyReport(base="working tree", targets=tuple(final), fixes=tuple(verdicts[i] for i in sorted(verdicts)), grad=grad)
