"""``check()``: dynamic detection on the targets plus static candidates for everything else.

Dynamic findings are the ground truth; static detection only covers files no target's run
traced (a file Dynamo ran through has already told us the truth about it), and never reports
a candidate at a site a dynamic break already reports. A ``# graphmend: ignore[...]`` comment
on a break's line silences a dynamic break as it silences a static one, so the gate (``pr``)
and every report leave it out alike.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Optional

from graphmend.config import Config
from graphmend.model import CheckReport, FileError, GraphBreak, TargetResult


def check(
    config: Config,
    paths: Optional[Iterable[str]] = None,
    target_names: Optional[Iterable[str]] = None,
    *,
    static: bool = True,
    dynamic: bool = True,
    progress: Any = None,
    runner: Any = None,
) -> CheckReport:
    """Find graph breaks. ``paths`` (repo-relative or absolute) narrow the static pass."""
    names = list(target_names or [])
    if names:
        for name in names:
            config.target(name)  # an unknown name is a usage error before anything runs
    targets: tuple[TargetResult, ...] = ()
    if dynamic and config.targets:
        from graphmend.detect.dynamic import detect_targets

        targets = detect_targets(config, names or None, runner=runner, progress=progress)
        targets = tuple(_without_suppressed(config.root, t) for t in targets)

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
        errors = tuple(result.errors)
    return CheckReport(targets=targets, static=static_breaks, errors=errors)


def _without_suppressed(root: Path, target: TargetResult) -> TargetResult:
    """``target`` without the breaks whose line (as it is in the repository) carries a
    suppression comment for the break's rule; the break count drops by as many."""
    from graphmend.sources import SourceError, read_source, suppressed

    lines: dict[str, list[str]] = {}

    def line_text(b: GraphBreak) -> str:
        if b.file.startswith(("/", "../")):
            return b.source_line
        if b.file not in lines:
            try:
                lines[b.file] = read_source(root, b.file).splitlines()
            except SourceError:
                lines[b.file] = []
        file_lines = lines[b.file]
        return file_lines[b.line - 1] if 0 < b.line <= len(file_lines) else b.source_line

    kept = tuple(b for b in target.breaks if not suppressed(line_text(b), b.rule))
    if len(kept) == len(target.breaks):
        return target
    dropped = len(target.breaks) - len(kept)
    return dataclasses.replace(target, breaks=kept, break_count=max(0, target.break_count - dropped))
