"""``check()``: dynamic detection on the targets plus static candidates for everything else.

Dynamic findings are the ground truth; static detection only covers files no target's run
traced (a file Dynamo ran through has already told us the truth about it), and never reports
a candidate at a site a dynamic break already reports.
"""

from __future__ import annotations

import os
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

    static_breaks: tuple[GraphBreak, ...] = ()
    errors: list[FileError] = []
    if static:
        traced = {f for t in targets for f in t.traced_files}
        files, path_errors = candidate_files(config, paths)
        errors.extend(path_errors)
        files = [f for f in files if f not in traced]
        if files:
            from graphmend.detect.static import detect_static

            result = detect_static(config, files=tuple(files))
            dynamic_sites = {(b.file, b.line) for t in targets for b in t.breaks}
            static_breaks = tuple(b for b in result.breaks if (b.file, b.line) not in dynamic_sites)
            errors.extend(result.errors)
    return CheckReport(targets=targets, static=static_breaks, errors=tuple(errors))


def candidate_files(config: Config, paths: Optional[Iterable[str]] = None) -> tuple[list[str], list[FileError]]:
    """Repo-relative ``*.py`` files under ``paths`` (default: the config's) that the config covers.

    Symlinked folders are not followed; symlinked files are listed and left to static
    detection, which reports one that leaves the repository.
    """
    root = Path(config.root).resolve()
    errors: list[FileError] = []
    roots: list[str] = []
    for p in (list(paths) if paths else list(config.paths)):
        full = Path(p) if os.path.isabs(p) else root / p
        try:
            rel = full.absolute().relative_to(root).as_posix()
        except ValueError:
            errors.append(FileError(path=str(p), message="outside the repository root"))
            continue
        if not full.exists() and not full.is_symlink():
            errors.append(FileError(path=str(p), message="no such file or folder"))
            continue
        roots.append(rel if rel != "" else ".")
    files: set[str] = set()
    for rel in roots:
        full = root / rel
        if full.is_file() or full.is_symlink():
            if config.is_in_paths(rel) or paths:
                files.add(rel)
            continue
        for dirpath, dirnames, filenames in os.walk(full):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            for name in filenames:
                if name.endswith(".py"):
                    f = (Path(dirpath) / name).relative_to(root).as_posix()
                    if config.is_in_paths(f):
                        files.add(f)
    return sorted(files), errors
