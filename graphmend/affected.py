"""Which targets a pull request can change, and the two sides' results assembled from that.

Every run of a target records the repository files it depended on (``TargetResult.depends_on``:
the files it opened or imported, which ``graphmend.worker`` records with an audit hook, and the
frames Dynamo traced). A pull request that changes none of a target's files, and no file the
record cannot vouch for, cannot change what the target does: its base results are carried
forward to the head, labelled "unaffected", and it does not run. The record cannot vouch for:

- a Python file added, removed or changed in type (a new module can shadow an import);
- a non-Python file other than documentation (a native library may read it, unseen by the
  audit hook): ``pyproject.toml``, ``requirements.txt``, a ``.json`` a tokenizer reads, a ``.so``;
- a target whose base run failed, or whose record is missing, incomplete or malformed.

Documentation (``*.md``, ``*.rst``, images, ``.github/``, ``LICENSE``) and GraphMend's own
configuration and baseline (the gate reads them from the base) count only when a target read
them. A change of torch or GraphMend version is a different cache key: the base runs again.

Static candidates are computed for the changed Python files only; the others' are the base's.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Collection, Iterable, Optional

from graphmend.config import CONFIG_NAMES, Config
from graphmend.model import CheckReport, GraphBreak, TargetResult

DOC_SUFFIXES = frozenset({".md", ".rst", ".adoc", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"})
DOC_NAMES = frozenset({"LICENSE", "LICENSE.txt", "NOTICE", "AUTHORS", "CODEOWNERS", ".gitignore", ".mailmap"})
# (.gitattributes is not documentation: it can change checked-out contents, e.g. working-tree-encoding)
DOC_PREFIXES = (".github/",)


@dataclass(frozen=True)
class Change:
    status: str  # git's letter: A, M, D, T
    path: str


def changed_files(root: Path, base_sha: str, head_sha: str) -> tuple[Change, ...]:
    """What the pull request changes, base to head (a rename is a removal and an addition)."""
    done = subprocess.run(["git", "diff", "--no-renames", "--no-ext-diff", "--name-status", "-z", base_sha, head_sha],
                          cwd=root, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"git diff {base_sha[:7]} {head_sha[:7]} failed: "
                           f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return tuple(Change(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i])


def _vouched(path: str, config: Config) -> bool:
    """Whether a target's record alone decides if a change of ``path`` can affect it."""
    p = PurePosixPath(path)
    return (p.suffix in DOC_SUFFIXES or p.name in DOC_NAMES or path.startswith(DOC_PREFIXES)
            or path in CONFIG_NAMES or path == config.gate.baseline)


def why_affected(base: Optional[TargetResult], changes: tuple[Change, ...], config: Config,
                 head_config: Optional[Config] = None) -> str:
    """Why the pull request may change this target's results ("" when it cannot)."""
    if base is None:
        return "its base results are not at hand"
    if base.error:
        return "it could not run on the base"
    if head_config is not None:
        mine = next((t for t in config.targets if t.name == base.name), None)
        theirs = next((t for t in head_config.targets if t.name == base.name), None)
        if mine != theirs:
            return "the pull request changes its configuration"
    return why_changes_reach(base.depends_on, changes, config)


def why_changes_reach(depends_on: Optional[Collection[str]], changes: Iterable[Change], config: Config) -> str:
    """Why ``changes`` may change what a run that read ``depends_on`` (repo-relative files; None:
    no complete record) computes, or "" when they cannot (the rules of this module's docstring).
    ``verify`` uses it too: a fix that edits no file a target read is not run on that target."""
    if depends_on is None:
        return "no complete record of the files it reads"
    reads = set(depends_on)
    changes = tuple(changes)
    for c in changes:
        if c.path in reads:
            return f"it reads {c.path}, which the pull request changes"
    for c in changes:
        if c.path.endswith(".py"):
            if c.status != "M":
                return f"the pull request {'adds' if c.status == 'A' else 'removes' if c.status == 'D' else 'retypes'} " \
                       f"{c.path} (a module it may import)"
        elif not _vouched(c.path, config):
            return f"the pull request changes {c.path}, a file its record cannot vouch for (not Python)"
    return ""


def without_traced(breaks: tuple[GraphBreak, ...], targets: tuple[TargetResult, ...]) -> tuple[GraphBreak, ...]:
    """Static candidates that no target's run already told the truth about (``check``'s rule)."""
    traced = {f for t in targets if not t.error for f in t.traced_files}
    sites = {(b.file, b.line) for t in targets for b in t.breaks}
    return tuple(b for b in breaks if b.file not in traced and (b.file, b.line) not in sites)


@dataclass(frozen=True)
class Outside:
    """What a shard knows of the targets outside its share, to verify its fixes on every target
    that reads the files they edit (as the unsharded run does): ``carried`` are unaffected (their
    base record stands for the head); the affected ones have no record here, so a fix is verified
    on them too; ``unknown`` have no base record in this shard at all."""

    carried: tuple[TargetResult, ...] = ()
    unknown: tuple[str, ...] = ()


def outside_share(entry: Any, configured: list[str], mine: list[str], changes: Optional[tuple[Change, ...]],
                  config: Config, head_config: Optional[Config]) -> Outside:
    """The targets of ``configured`` not in ``mine`` (this shard's share), by what the base cache
    ``entry`` says of them."""
    carried: list[TargetResult] = []
    unknown: list[str] = []
    for name in configured:
        if name in mine:
            continue
        t = entry.target(name) if entry is not None else None
        if t is None:
            unknown.append(name)
        elif changes is not None and not why_affected(t, changes, config, head_config):
            carried.append(t)
    return Outside(tuple(carried), tuple(unknown))


@dataclass
class Sides:
    """The two sides' results and how they were obtained."""

    base: CheckReport
    head: CheckReport
    status: dict[str, str] = field(default_factory=dict)  # target -> analysed | unaffected
    reasons: dict[str, str] = field(default_factory=dict)
    base_cached: list[str] = field(default_factory=list)  # targets whose base results came from the cache
    static_cached: bool = False
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds


def run_sides(*, check: Callable[..., CheckReport], base_config: Config, head_config: Config, pr_config: Optional[Config],
              changes: Optional[tuple[Change, ...]], names: list[str], static: bool, entry: Any,
              store: Callable[[CheckReport, list[str], bool], None], say: Callable[[str], None]) -> Sides:
    """Base results (cached or run) for ``names``, then the head: the affected targets run, the
    others are carried forward. ``changes`` None analyses every target and file (``--all-targets``).
    ``static``: this run does the static pass (one shard of a sharded run does)."""
    seconds: dict[str, float] = {}
    need = [n for n in names if entry is None or entry.target(n) is None]
    need_static = static and (entry is None or not entry.static)
    fresh = CheckReport()
    started = time.monotonic()
    if need:
        say(f"pr: analysing the base: {len(need)} target(s)")
        fresh = check(base_config, target_names=need, static=False)
    if need_static:
        say("pr: static pass on the base")
        found = check(base_config, static=True, dynamic=False)
        fresh = dataclasses.replace(fresh, static=found.static, errors=found.errors)
    if need or need_static:
        store(fresh, need, need_static)
    seconds["base"] = time.monotonic() - started
    by_name = {t.name: t for t in fresh.targets}
    base_targets = tuple(by_name.get(n) or entry.target(n) for n in names)
    base_static = (fresh.static if need_static else entry.report.static) if static else ()
    base_errors = fresh.errors if need_static else ()

    status: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for t in base_targets:
        why = "--all-targets" if changes is None else why_affected(t, changes, base_config, pr_config)
        status[t.name] = "analysed" if why else "unaffected"
        reasons[t.name] = why or "the pull request changes no file it reads: the base's results are carried forward"
    run = [n for n in names if status[n] == "analysed"]
    started = time.monotonic()
    ran = CheckReport()
    if run:
        say(f"pr: analysing the head: {len(run)} of {len(names)} target(s) affected")
        ran = check(head_config, target_names=run, static=False)
    seconds["head"] = time.monotonic() - started
    started = time.monotonic()
    rerun_files: Optional[set[str]] = None  # None: every file
    head_static: tuple[GraphBreak, ...] = ()
    head_errors: tuple = ()
    if static:
        if changes is not None:
            rerun_files = {c.path for c in changes if c.path.endswith(".py") and c.status != "D"}
        wanted = sorted(f for f in (rerun_files or ()) if head_config.is_in_paths(f))
        if rerun_files is None or wanted:
            found = check(head_config, paths=wanted or None, static=True, dynamic=False)
            head_static, head_errors = found.static, found.errors
    seconds["static"] = time.monotonic() - started
    changed = {c.path for c in changes} if changes is not None else None
    if changed is not None:
        head_static += tuple(b for b in base_static if b.file not in changed)
        head_errors += tuple(e for e in base_errors if e.path not in changed)
    ran_by_name = {t.name: t for t in ran.targets}
    head_targets = tuple(ran_by_name[n] if status[n] == "analysed" else by_name.get(n) or entry.target(n) for n in names)
    base = CheckReport(targets=base_targets, static=without_traced(base_static, base_targets), errors=base_errors)
    head = CheckReport(targets=head_targets, static=without_traced(head_static, head_targets), errors=head_errors)
    cached = [n for n in names if n not in need]
    return Sides(base, head, status, reasons, cached, static and not need_static, seconds)
