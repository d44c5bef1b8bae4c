"""One module per CLI verb: ``HELP``-free, with ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from graphmend.config import Config, load_config


class UsageError(Exception):
    """A usage error; the CLI exits with 2 and prints the message on one line."""


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration for a verb: ``--config`` or the file at ``--root``."""
    return load_config(Path(args.root), args.config)


def warn(verb: str, text: str) -> None:
    """One message on stderr, ``graphmend VERB: text``, with untrusted text (a target's error, a
    file's message) unable to act as a workflow command in a GitHub Actions log."""
    from graphmend.report.github import neutralise

    print(f"graphmend {verb}: {neutralise(text)}", file=sys.stderr, flush=True)


def progress_to_stderr(verb: str) -> Callable[[str], None]:
    """Progress lines on stderr, each prefixed ``graphmend VERB:`` once."""
    def say(message: str) -> None:
        warn(verb, message.split(': ', 1)[-1] if message.startswith(verb + ':') else message)

    return say


def write_report(args: argparse.Namespace, verb: str, report: Any, render_text: Callable[[Any], str],
                 render_markdown: Callable[[Any], str], chart_key: str) -> None:
    """``--markdown FILE`` and ``--chart FILE`` if asked, then the report on stdout (``--format``).

    ``chart_key`` is the keyword ``write_chart`` takes this report as (``verify_report``, ...).
    """
    if args.markdown:
        from graphmend import fsutil

        fsutil.write_text(args.markdown, render_markdown(report))
    if args.chart:
        from graphmend.report.chart import write_chart

        try:
            write_chart(args.chart, **{chart_key: report})
        except ValueError as exc:
            print(f"graphmend {verb}: chart not written: {exc}", file=sys.stderr)
    if args.format == "json":
        from graphmend.model import to_dict

        sys.stdout.write(json.dumps(to_dict(report), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(report))
