"""``graphmend demo``: GraphMend on the bundled ``examples/`` repository (for now: ``check``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphmend.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-dynamic", action="store_true", help="do not run the example targets")
    parser.add_argument("--no-static", action="store_true", help="skip static detection")


def run(args: argparse.Namespace) -> int:
    from graphmend.cli import UsageError
    from graphmend.commands.check import run_check

    root = EXAMPLES if args.root == "." else Path(args.root)
    if not (root / "graphmend.yml").is_file():
        raise UsageError(f"{root}: the examples repository is not there (graphmend.yml missing)")
    config = load_config(root, args.config)
    args.paths, args.target = [], None
    return run_check(config, args)
