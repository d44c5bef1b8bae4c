"""``graphmend apply review.json``: answer a ``/graphmend apply`` comment on a pull request.

Run by an ``issue_comment`` workflow with ``contents: write`` and ``pull-requests: write``. It
never reads the pull request's code and never imports torch: it commits the verified fixes of
the analysis (review.json, from the analysis run's artifact) to the pull request's branch
through the Git Data API when the commenter has write permission (asked of GitHub), the head
is the analysed one and the fixes are those the bot's review offered; otherwise it replies
why (with the patch, for a fork that does not allow edits by maintainers). The pull request
and the comment come from the event payload (``GITHUB_EVENT_PATH``) or ``--pr`` and
``--comment-id``.

Exit codes: 0 committed, or nothing asked (the comment is not the command); 1 refused (the
reply says why) or GitHub failed; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from graphmend.commands import UsageError

MAX_REVIEW_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("review", metavar="REVIEW_JSON", help="the review.json of the analysis of the pull request's head")
    parser.add_argument("--event", metavar="FILE", help="the issue_comment event payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="the repository (default: from the event, else $GITHUB_REPOSITORY)")
    parser.add_argument("--pr", type=int, metavar="N", help="the pull request number (without an event)")
    parser.add_argument("--comment-id", type=int, metavar="ID", help="the /graphmend apply comment's id (without an event)")
    parser.add_argument("--token-env", default="GITHUB_TOKEN", metavar="NAME",
                        help="the environment variable holding the token (default: GITHUB_TOKEN; a GitHub App's token "
                             "makes the pushed commit trigger the analysis again)")
    parser.add_argument("--api-url", metavar="URL", help="the REST API base URL (default: $GITHUB_API_URL or api.github.com)")


def _from_event(args: argparse.Namespace) -> tuple[str, int, int]:
    path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    if args.pr is not None or args.comment_id is not None:
        if args.pr is None or args.comment_id is None:
            raise UsageError("--pr and --comment-id go together")
        return repo, args.pr, args.comment_id
    if not path:
        raise UsageError("no event payload: pass --event (or set GITHUB_EVENT_PATH), or --pr and --comment-id")
    try:
        payload = json.loads(open(path, encoding="utf-8").read())
        issue, comment = payload["issue"], payload["comment"]
        number, comment_id = int(issue["number"]), int(comment["id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"event payload {path}: not an issue_comment event ({exc.__class__.__name__})") from None
    if not issue.get("pull_request"):
        raise UsageError(f"event payload {path}: the comment is on an issue, not a pull request")
    return repo or ((payload.get("repository") or {}).get("full_name")) or "", number, comment_id


def run(args: argparse.Namespace) -> int:
    from bot import review as review_mod
    from bot.apply import Applier
    from bot.post import GITHUB_FAILURES, connect

    repo, number, comment_id = _from_event(args)
    if not repo or "/" not in repo:
        raise UsageError("no repository: pass --repo OWNER/NAME (or set GITHUB_REPOSITORY)")
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"no token in ${args.token_env}")
    path = Path(args.review)
    if path.is_symlink() or not path.is_file():
        raise UsageError(f"{args.review}: not a regular file (a link is not followed)")
    if path.stat().st_size > MAX_REVIEW_BYTES:
        raise UsageError(f"{args.review}: over {MAX_REVIEW_BYTES // (1 << 20)} MiB")
    try:
        review = review_mod.load(path)
    except review_mod.ReviewError as exc:
        raise UsageError(str(exc)) from None
    try:
        client = connect(token, repo, args.api_url)
        applier = Applier(client, number, comment_id, head_client=lambda name: connect(token, name, args.api_url))
        result = applier.run(review)
    except GITHUB_FAILURES as exc:
        print(f"graphmend apply: error: GitHub: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps({"outcome": result.outcome, "reason": result.reason, "commit": result.commit_sha,
                          "reply_id": result.reply_id, "files": list(result.files), "pr": number,
                          "not_shown": list(result.not_shown)}, indent=2, sort_keys=True))
    else:
        from bot.render import plain

        print(f"graphmend apply: {result.outcome}: {result.reason}")
        for line in result.not_shown:
            print(f"  not shown: {plain(line, 300)}")
    return 0 if result.outcome in ("committed", "ignored") else 1
