"""``graphmend check [PATH...] [--target NAME] [--no-dynamic] [--no-static]``.

Exit codes: 0 clean; 1 breaks found, a target that could not run, or a file that could not
be read; 2 a usage or configuration error (raised as ``ConfigError`` / ``UsageError``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, Iterator

from graphmend.commands import config_from_args, warn
from graphmend.model import CheckReport, to_dict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders for the static pass (default: the config's paths)")
    parser.add_argument("--target", action="append", metavar="NAME", help="run only this target (repeatable)")
    parser.add_argument("--no-dynamic", action="store_true", help="do not run the targets")
    parser.add_argument("--no-static", action="store_true", help="skip static detection")
    parser.add_argument("--no-lever-runs", action="store_true",
                        help="do not run a target again with a compile setting (GM5xx) in force to see whether it "
                             "helps; without that run no setting is advised")


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    return run_check(config, args)


def run_check(config: Any, args: argparse.Namespace) -> int:
    from graphmend.check import check, unmatched_paths

    for start in unmatched_paths(config):
        # `check` would say "All clear" about a folder that does not exist: say so first.
        print(f"graphmend check: warning: {config.display_file}: paths entry {start!r} matches no Python file; "
              "nothing there is checked or fixed (see `paths:`)", file=sys.stderr)
    with stderr_progress() as progress:
        report = check(config, args.paths or None, args.target or None,
                       static=not args.no_static, dynamic=not args.no_dynamic, progress=progress,
                       try_levers=not getattr(args, "no_lever_runs", False))
    for t in report.targets:
        if t.error:
            warn("check", f"target {t.name}: {t.error}")
    for e in report.errors:
        warn("check", f"{e.path}: {e.message}")
    sys.stdout.write(render(report, args.format))
    return exit_code(report)


def exit_code(report: CheckReport) -> int:
    """1 when anything was found or anything could not run (a crashed target is never green)."""
    return 1 if report.failed or report.all_breaks else 0


def render(report: CheckReport, fmt: str) -> str:
    try:
        from graphmend.report import render_check
    except ImportError:
        render_check = None
    if render_check is not None:
        text = render_check(report, fmt)
    else:  # the reporters are not there: JSON is the contract every format derives from
        text = json.dumps(to_dict(report), indent=2, sort_keys=True)
    return text if text.endswith("\n") or not text else text + "\n"


@contextlib.contextmanager
def stderr_progress() -> Iterator[Any]:
    """A progress bar on stderr while targets run (each takes seconds); silent when not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("targets", total=None)

        def progress(name: str, done: int, total: int) -> None:
            bar.update(task, total=total, completed=done, description=f"target {name}" if name else "done")

        yield progress
