"""``graphmend merge PARTIAL...``: join the partial reviews of a sharded run into one review.json.

Each ``graphmend pr --shard I/N`` writes a partial review of its share
of the targets. ``merge`` checks that the partials belong together (one base and head commit, one
configuration, one shard count, one partial per shard), joins them and writes ``review.json``
and the step summary, for ``graphmend post`` to post once. A shard without a partial (its job
failed or its artifact is missing) is named, and its targets are marked not-analysed: the merged
gate fails closed. So is a configured target that no shard planned: the configured targets are
the base commit's configuration when ``-C`` (default: the current directory) is a checkout that
holds the base commit, else the list every partial records. Partial reports of ``scan --shard I/N --partial FILE`` are joined the same way
into the SARIF file (``--sarif``) and the step summary. Exit codes: 0 the gate passes (scan: no
breaks); 1 it fails, a shard is missing (scan: breaks remain); 2 partials that do not belong
together, or unreadable ones.
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
    parser.add_argument("--sarif", default="graphmend.sarif", metavar="FILE",
                        help="for scan partials (scan --shard): where to write the SARIF (default: graphmend.sarif)")


def _files(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir() and not path.is_symlink():
            out += sorted(p for p in path.rglob("*.json") if p.is_file() and not p.is_symlink())
        else:
            out.append(path)
    return out


def _read(path: Path) -> object:
    """A partial's JSON value, read as review.json is (``bot.review``'s limits): a regular file,
    never a symlink, bounded in bytes, values and depth."""
    from bot.review import MAX_BYTES, MAX_VALUES
    from graphmend.runner.channel import ChannelError, clean_text, read_json

    try:
        return read_json(path.parent, path.name, MAX_BYTES, max_values=MAX_VALUES)
    except ChannelError as exc:
        raise UsageError(f"{path}: {clean_text(str(exc))}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from graphmend.shard import SCAN_KIND

    files = _files(args.partials)
    if not files:
        raise UsageError("no partial reviews found in " + ", ".join(args.partials))
    data = [_read(path) for path in files]
    scans = [isinstance(d, dict) and d.get("kind") == SCAN_KIND for d in data]
    if any(scans) and not all(scans):
        raise UsageError("the partials mix scan reports (scan --shard) and reviews (pr --shard): merge one run's")
    return (_merge_scan if all(scans) else _merge_reviews)(args, files, data)


def _merge_reviews(args: argparse.Namespace, files: list[Path], data: list) -> int:
    from bot import render
    from bot.review import ReviewError, dump, from_json

    from graphmend import fsutil
    from graphmend.pr import timing_markdown
    from graphmend.shard import ShardError, merge

    partials = []
    for path, item in zip(files, data):
        try:
            partials.append(from_json(item))
        except ReviewError as exc:
            raise UsageError(f"{path}: {exc}") from None
    configured = _configured_targets(Path(args.root), partials[0].base_sha, args.config) if partials else None
    try:
        review, problems, verdict = merge(partials, [str(p) for p in files], configured)
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
                          "output": args.output, "configured_targets_from": "partials" if configured is None
                          else "base commit"}, indent=2, sort_keys=True))
    else:
        print(f"graphmend merge: {len(partials)} partial(s): {verdict.headline}; wrote {args.output}")
    return 0 if verdict.passed and not problems else 1


def _configured_targets(root: Path, base_sha: str, config_name) -> "list[str] | None":  # noqa: ANN001
    """The target names of the base commit's configuration (as ``pr`` scoped the run), or None
    when ``root`` is not a checkout that holds the base commit."""
    from graphmend.pr import PrError, resolve, scope_config

    try:
        sha = resolve(root, base_sha, "base")
    except (PrError, OSError):
        return None
    config, _accepted, _problem = scope_config(root.resolve(), sha, config_name)
    return [t.name for t in config.targets]


def _merge_scan(args: argparse.Namespace, files: list[Path], data: list) -> int:
    from graphmend import fsutil
    from graphmend.scan import ScanResult, render_sarif, summary_markdown
    from graphmend.shard import ShardError, merge_scan, read_scan_partial

    try:
        partials = [read_scan_partial(item, str(path)) for path, item in zip(files, data)]
        report, problems = merge_scan(partials, [str(p) for p in files])
    except ShardError as exc:
        raise UsageError(str(exc)) from None
    result = ScanResult(report, fix_note="a sharded scan proposes no fixes")
    sarif = Path(args.sarif)
    sarif.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(sarif, render_sarif(result))
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(summary_markdown(result))
    for problem in problems:
        print(f"graphmend merge: {problem}", file=sys.stderr)
    breaks = report.all_breaks
    if args.format == "json":
        print(json.dumps({"breaks": len(breaks), "failed": report.failed, "problems": problems, "partials": len(partials),
                          "sarif": str(sarif)}, indent=2, sort_keys=True))
    else:
        print(f"graphmend merge: {len(partials)} scan partial(s): {len(breaks)} break(s); wrote {sarif}")
    return result.exit_code
