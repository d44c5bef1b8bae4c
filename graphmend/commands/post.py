"""``graphmend post review.json``: post a finished analysis to its pull request.

It never reads the pull request's code and never imports torch (only ``bot`` and the
standard library): it can run in a job that holds a write token while ``graphmend pr`` ran
the untrusted code elsewhere. The pull request comes from the trusted event payload
(``GITHUB_EVENT_PATH`` / ``GITHUB_EVENT_NAME``) or from ``--pr`` and ``--head-sha``; a
review.json for another head commit is refused.

Exit codes: 0 the gate passed; 1 the gate failed (or GitHub refused for good); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from graphmend.commands import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("review", metavar="REVIEW_JSON", help="the review.json written by `graphmend pr`")
    parser.add_argument("--event", metavar="FILE", help="the event payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument("--event-name", help="the event name (default: $GITHUB_EVENT_NAME)")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="the repository (default: from the event, else $GITHUB_REPOSITORY)")
    parser.add_argument("--pr", type=int, metavar="N", help="the pull request number (without an event)")
    parser.add_argument("--head-sha", metavar="SHA", help="the pull request's head commit (without an event)")
    parser.add_argument("--token-env", default="GITHUB_TOKEN", metavar="NAME",
                        help="the environment variable holding the token (default: GITHUB_TOKEN)")
    parser.add_argument("--api-url", metavar="URL", help="the REST API base URL (default: $GITHUB_API_URL or api.github.com)")
    parser.add_argument("--fail-on", choices=("new-breaks", "any-break", "never"), help="override gate.fail_on")
    parser.add_argument("--baseline", metavar="FILE",
                        help="the baseline file as it is on the base branch (re-marks accepted breaks)")
    parser.add_argument("--summary", metavar="FILE", help="append the step summary here (default: $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--max-inline", type=int, default=30, metavar="N", help="at most N inline comments (default: 30)")
    parser.add_argument("--comment", choices=("on-change", "always", "never"),
                        help="override review.comment of the base branch's configuration")
    parser.add_argument("--suggestions", choices=("true", "false"), help="override review.suggestions")
    parser.add_argument("--safety", choices=("safe", "unsafe"), help="override fix.safety")
    parser.add_argument("--max-rate-limit-wait", type=float, default=300.0, metavar="SECONDS",
                        help="wait at most this long for GitHub's rate limit to reset; past it, fail saying when to "
                             "retry (default: 300)")


def _event(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    name = args.event_name or os.environ.get("GITHUB_EVENT_NAME") or ""
    if not path:
        return name, {}
    try:
        return name, json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"event payload {path}: cannot read: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from bot import review as review_mod
    from bot.gate import baseline_fingerprints
    from bot.post import GITHUB_FAILURES, Poster, PostError, PullTarget, connect, pull_from_event

    try:
        review = review_mod.load(args.review)
    except review_mod.ReviewError as exc:
        raise UsageError(str(exc)) from None
    if review.shard is not None:
        # One shard's share is not the pull request's result: its gate would pass on what the
        # other shards never saw.
        raise UsageError(f"{args.review} is the partial review of shard {review.shard.index}/{review.shard.count}: "
                         "join the shards with graphmend merge and post its review.json")

    baseline: Optional[frozenset[str]] = None
    if args.baseline:
        try:
            baseline = baseline_fingerprints(Path(args.baseline).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"baseline {args.baseline}: cannot read: {exc}") from None

    if not args.max_rate_limit_wait >= 0:
        raise UsageError(f"--max-rate-limit-wait: expected seconds >= 0, found {args.max_rate_limit_wait}")
    event_name, payload = _event(args)
    token = os.environ.get(args.token_env, "")
    client = None
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")

    def out(line: str) -> None:
        # Workflow commands: with --format json stdout is one JSON document for the caller
        # to parse, so they go to stderr (the runner reads commands from both streams).
        print(line, file=sys.stderr if args.format == "json" else sys.stdout, flush=True)

    try:
        repo = args.repo or ((payload.get("repository") or {}).get("full_name")) or os.environ.get("GITHUB_REPOSITORY", "")
        if token and repo:
            client = connect(token, repo, args.api_url, max_rate_limit_wait_s=args.max_rate_limit_wait)
        if args.pr is not None:
            if not args.head_sha:
                raise UsageError("--pr needs --head-sha (the commit the review is for)")
            target = PullTarget(repo, args.pr, args.head_sha)
        elif payload:
            finder = client.find_pull_by_head_sha if client else (lambda sha: None)
            target = pull_from_event(event_name, payload, finder)
            target = PullTarget(repo or target.repository, target.number, target.head_sha)
        else:
            raise UsageError("no event payload: pass --event (or set GITHUB_EVENT_PATH), or --pr and --head-sha")
        poster = Poster(client, target, fail_on=args.fail_on, baseline=baseline, out=out,
                        summary_path=Path(summary) if summary else None, max_inline=args.max_inline,
                        overrides={k: v for k, v in (("comment", args.comment), ("safety", args.safety),
                                                     ("suggestions", None if args.suggestions is None else args.suggestions == "true"))
                                   if v is not None})
        if client is None:
            why = f"no token in ${args.token_env}" if not token else "no repository named"
            result = poster.post_offline(review, why)
        else:
            result = poster.post(review)
    except PostError as exc:
        raise UsageError(str(exc)) from None
    except GITHUB_FAILURES as exc:  # a GitHub failure we could not work around: one line, the gate fails
        print(f"graphmend post: error: GitHub: {exc}", file=sys.stderr)
        return 1

    v = result.verdict
    if args.format == "json":
        print(json.dumps({
            "passed": v.passed, "new": v.new, "fixed": v.fixed, "mode": result.mode, "gate": result.gate,
            "pr": target.number, "head_sha": target.head_sha, "review_id": result.review_id, "inline": result.inline, "sticky_id": result.sticky_id,
            "deleted_comments": result.deleted_comments, "notes": result.notes,
        }, indent=2, sort_keys=True))
    else:
        print(f"graphmend post: {'passed' if v.passed else 'failed'}: {v.headline} "
              f"({v.new} new, {v.fixed} fixed; gate via {result.gate}, {result.inline} inline comment(s))")
        for note in result.notes:
            print(f"  note: {note}")
    return result.exit_code
