"""``graphmend merge PARTIAL...``: join the partial reviews of a sharded run into one review.json.

Each ``graphmend pr --shard I/N`` (or ``scan --shard I/N``) writes a partial review of its share
of the targets. ``merge`` checks that the partials belong together (one base and head commit, one
configuration, one shard count, one partial per shard), joins them and writes ``review.json``
and the step summary, for ``graphmend post`` to post once. A shard without a partial (its job
failed or its artifact is missing) is named, and its targets are marked not-analysed: the merged
gate fails closed. Exit codes: 0 the gate passes; 1 it fails or a shard is missing; 2 partials
that do not belong together, or unreadable ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from graphmend.commands import UsageError

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("partials", nargs="+", metavar="PARTIAL_JSON",
                        help="the partial reviews (files, or folders holding them, e.g. downloaded artifacts)")
    parser.add_argument("--output", "-o", default="review.json", metavar="FILE", help="where to write review.json")
    parser.add_argument("--summary", metavar="FILE", help="append the step summary here (default: $GITHUB_STEP_SUMMARY)")


def _files(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir() and not path.is_symlink():
            out += sorted(p for p in path.rglob("*.json") if p.is_file() and not p.is_symlink())
        else:
            out.append(path)
    return out


def run(args: argparse.Namespace) -> int:
    from bot import render
    from bot.review import ReviewError, dump, load

    from graphmend import fsutil
    from graphmend.pr import timing_markdown
    from graphmend.shard import ShardError, merge

    files = _files(args.partials)
    if not files:
        raise UsageError("no partial reviews found in " + ", ".join(args.partials))
    partials = []
    for path in files:
        if path.is_symlink():
            raise UsageError(f"{path}: a symlink; pass the partial review itself")
        try:
            partials.append(load(path))
        except ReviewError as exc:
            raise UsageError(str(exc)) from None
    try:
        review, problems, verdict = merge(partials, [str(p) for p in files])
    except ShardError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(out, dump(review))
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(render.summary_markdown(review, verdict))
            fh.write(timing_markdown(review))
    for problem in problems:
        print(f"graphmend merge: {problem}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"passed": verdict.passed, "problems": problems, "partials": len(partials),
                          "output": args.output}, indent=2, sort_keys=True))
    else:
        print(f"graphmend merge: {len(partials)} partial(s): {verdict.headline}; wrote {args.output}")
    return 0 if verdict.passed and not problems else 1
