"""``graphmend <verb>``: the command line.

Only the chosen verb's module is imported, so ``graphmend post`` and ``--help`` never pay
for (or need) torch. Each verb lives in ``graphmend/commands/<verb>.py`` with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes: 0 clean; 1 findings or anything that could not run; 2 usage or configuration.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from graphmend import __version__
from graphmend.commands import UsageError
from graphmend.config import ConfigError

# verb -> one-line help; the module is graphmend.commands.<verb>
VERBS: dict[str, str] = {
    "check": "find graph breaks (dynamic on targets, static elsewhere)",
    "fix": "rewrite the fixable graph breaks in place (or print the diff)",
    "verify": "prove the working tree computes what --base computes, with fewer breaks",
    "bench": "cold start, steady state and throughput, before vs after",
    "pr": "analyse a pull request and write review.json (never posts)",
    "post": "post a finished review.json to GitHub (no torch needed)",
    "merge": "join the partial reviews of a sharded run (pr --shard I/N) into one review.json",
    "apply": "commit a review's verified fixes to the pull request (/graphmend apply; no torch needed)",
    "scan": "scan the default branch: SARIF, summary, a fix pull request",
    "baseline": "write the accepted-breaks file the merge gate reads",
    "init": "write a commented graphmend.yml and a targets module skeleton",
    "demo": "the whole pipeline on the bundled examples/ repository",
    "rules": "list the rules: code, name, safety, what each fixes",
    "explain": "show one rule's documentation",
}

FORMATS_BY_VERB = {"check": ("text", "json", "sarif", "github")}


def torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def add_common(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--config", metavar="FILE", help="configuration file (default: graphmend.yml or .github/graphmend.yml)")
    parser.add_argument("-C", "--root", metavar="DIR", default=".", help="repository root (default: the current directory)")
    parser.add_argument("--format", choices=FORMATS_BY_VERB.get(verb, ("text", "json")), default="text", help="output format")


def build_parser(verb: Optional[str] = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphmend",
        description="Find and fix TorchDynamo graph breaks.",
        epilog="Run 'graphmend VERB --help' for a verb's options. Exit codes: 0 clean, 1 findings or a failure, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"graphmend {__version__} (torch {torch_version()})")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, help_text in VERBS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == verb:
            module = importlib.import_module(f"graphmend.commands.{name}")
            add_common(p, name)
            module.add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb not in VERBS:
        verb = None
    parser = build_parser(verb)
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return 2
    module = importlib.import_module(f"graphmend.commands.{args.verb}")
    try:
        return int(module.run(args) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"graphmend {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphmend: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
