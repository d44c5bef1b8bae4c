"""``graphmend verify [--target NAME] [--base REV] [--grad]``.

"Before" is the tree at REV (default HEAD), "after" the working tree: run ``fix``, then
``verify``. When the two trees hold the same bytes it says "no source change" and runs nothing
(``--run-unchanged`` runs the targets anyway). Exit codes: 0 every target equivalent (or no
source change); 1 a difference or a target that could not
run; 2 a usage or configuration error (an unknown revision included).
"""

from __future__ import annotations

import argparse

from graphmend.commands import UsageError, config_from_args, progress_to_stderr, write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", action="append", metavar="NAME", help="verify only this target (repeatable)")
    parser.add_argument("--base", default="HEAD", metavar="REV", help='the "before" tree (default: HEAD)')
    parser.add_argument("--grad", action="store_true", help="compare gradients too")
    parser.add_argument("--markdown", metavar="FILE", help="also write the markdown report to FILE")
    parser.add_argument("--chart", metavar="FILE", help="also write a PNG chart of graphs/breaks before and after")
    parser.add_argument("--no-breaks", action="store_true", help="do not count graphs and breaks (faster)")
    parser.add_argument("--run-unchanged", action="store_true",
                        help="run the targets even when the working tree is identical to REV (by default: "
                             "'no source change', nothing run, exit 0)")


def run(args: argparse.Namespace) -> int:
    from graphmend.trees import TreeError
    from graphmend.verify import verify

    config = config_from_args(args)
    if not config.targets:
        raise UsageError(f"{config.display_file}: no targets configured: verify runs targets (see graphmend init)")
    try:
        report = verify(config, args.target or None, base=args.base, grad=args.grad, progress=progress_to_stderr("verify"),
                        count_breaks=not args.no_breaks, run_unchanged=args.run_unchanged)
    except TreeError as exc:
        raise UsageError(str(exc)) from None
    from graphmend.report.markdown_verify import render_verify_markdown, render_verify_text

    write_report(args, "verify", report, render_verify_text, render_verify_markdown, "verify_report")
    return 1 if report.failed else 0
