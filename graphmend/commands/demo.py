"""``graphmend demo``: check → fix → verify → bench on the bundled ``examples/`` repository.

The examples are copied into a fresh git repository inside the output folder first; the bundled
files never change. Exit code 0 when every stage ran and every fix verified; 1 otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphmend.commands import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="graphmend-demo", metavar="DIR",
                        help="folder for the artifacts and the fixed copy (default: ./graphmend-demo)")
    parser.add_argument("--source", metavar="DIR", help="a model repository with a graphmend.yml (default: the bundled examples/)")
    parser.add_argument("--no-bench", action="store_true", help="skip the benchmark stage")


def run(args: argparse.Namespace) -> int:
    from graphmend.demo import EXAMPLES, run_demo

    source = Path(args.source) if args.source else EXAMPLES
    if not (source / "graphmend.yml").is_file():
        raise UsageError(f"{source}: no graphmend.yml there (the demo needs a repository with targets)")
    result = run_demo(Path(args.out).resolve(), source=source, bench=not args.no_bench)
    return 1 if result.failed else 0
