"""``graphmend pr``: analyse a pull request's head against its base and write review.json.

Needs the checkout (with both commits) and never a token: it runs the pull request's code
and posts nothing. ``graphmend post review.json`` posts the result from a trusted job.
With ``--shard I/N`` it writes a partial review of one share of the targets; ``graphmend merge``
joins the partials and decides the gate. Exit codes: 0 the gate passes (a shard: its targets
ran); 1 it fails (or a target could not run); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from graphmend.commands import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", metavar="SHA", help="the base commit (default: pull_request.base.sha of the event)")
    parser.add_argument("--head", metavar="SHA", help="the head commit (default: pull_request.head.sha of the event)")
    parser.add_argument("--event", metavar="FILE", help="the event payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument("--output", "-o", default="review.json", metavar="FILE", help="where to write review.json")
    parser.add_argument("--summary", metavar="FILE", help="append the step summary here (default: $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="where the base's results are cached, e.g. a folder actions/cache saves and restores "
                             "(default: $GRAPHMEND_CACHE_DIR, else ~/.cache/graphmend/base)")
    parser.add_argument("--no-cache", action="store_true", help="analyse the base even when it is cached")
    parser.add_argument("--all-targets", action="store_true",
                        help="run every target on the head, not only those the pull request can affect")
    parser.add_argument("--shard", metavar="I/N",
                        help="analyse the I-th of N balanced shares of the targets and write a partial review "
                             "(join the partials with graphmend merge)")
    parser.add_argument("--bench", action="store_true", help="benchmark the verified fixes too")
    parser.add_argument("--no-fix", action="store_true", help="report breaks only: propose and verify no fixes")
    parser.add_argument("--allow-unsandboxed", action="store_true",
                        help="run the pull request's code with the subprocess runner even where bubblewrap is not usable "
                             "(it then isolates crashes, not hostile code; use sandbox.runner: docker instead)")


def run(args: argparse.Namespace) -> int:
    from graphmend.pr import PrError, analyse, default_cache_dir, shas_from_event, write_outputs
    from graphmend.shard import ShardError, parse
    from graphmend.trees import TreeError

    try:
        shard = parse(args.shard) if args.shard else None
    except ShardError as exc:
        raise UsageError(str(exc)) from None

    base, head = args.base, args.head
    event_path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    if (not base or not head) and event_path:
        try:
            payload = json.loads(Path(event_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"event payload {event_path}: cannot read: {exc}") from None
        ev_base, ev_head = shas_from_event(payload)
        base, head = base or ev_base, head or ev_head
    if not base or not head:
        raise UsageError("no base/head: pass --base and --head, or an event with pull_request.base.sha and .head.sha")
    cache_dir = args.cache_dir or os.environ.get("GRAPHMEND_CACHE_DIR")
    cache = None if args.no_cache else Path(cache_dir) if cache_dir else default_cache_dir()
    try:
        result = analyse(Path(args.root), base, head, config_name=args.config, cache_dir=cache, bench=args.bench,
                         propose_fixes=not args.no_fix, allow_unsandboxed=args.allow_unsandboxed,
                         all_targets=args.all_targets, shard=shard,
                         progress=lambda m: print(m, file=__import__("sys").stderr))
    except (PrError, TreeError) as exc:
        raise UsageError(str(exc)) from None
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    write_outputs(result, Path(args.output), Path(summary) if summary else None)
    v, t = result.verdict, result.review.timing
    if shard is not None:
        print(f"graphmend pr: shard {shard[0]}/{shard[1]}: wrote the partial review {args.output} "
              "(join the partials with graphmend merge; the gate is decided there)")
        return 0 if not v.failed_targets else 1
    if args.format == "json":
        print(json.dumps({"passed": v.passed, "new": v.new, "fixed": v.fixed, "unchanged": v.unchanged,
                          "base_from_cache": result.base_from_cache, "output": args.output,
                          "targets_analysed": t.targets_analysed, "targets_unaffected": t.targets_unaffected,
                          "cache": t.cache, "seconds": t.total_s}, indent=2, sort_keys=True))
    else:
        print(f"graphmend pr: {v.headline} ({v.new} new, {v.fixed} fixed, {v.unchanged} unchanged); "
              f"{t.targets_analysed} target(s) analysed, {t.targets_unaffected} unaffected, base cache {t.cache}, "
              f"{t.total_s:.0f} s; wrote {args.output}")
    return 0 if v.passed else 1
