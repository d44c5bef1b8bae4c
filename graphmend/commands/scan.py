"""``graphmend scan``: the default branch as a whole, for a scheduled job.

Writes the SARIF file for code-scanning upload and the step summary; with ``--pull-request``
it also opens (or updates, or closes) the one pull request that carries every verified fix,
committed through the Git Data API (``bot.scan_pr``). Authentication: a token from
``--token-env`` (default ``GITHUB_TOKEN``), or a GitHub App (``--app-id`` with its private key)
whose installation token lets the pull request trigger CI — a pull request opened with the
workflow's ``GITHUB_TOKEN`` triggers no workflows.

Exit codes: 0 no breaks; 1 breaks found, a target that could not run, or GitHub refused the
pull request (the SARIF and summary are written first); 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from graphmend import fsutil
from graphmend.commands import UsageError, config_from_args, warn


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sarif", default="graphmend.sarif", metavar="FILE", help="where to write SARIF (default: graphmend.sarif)")
    parser.add_argument("--summary", metavar="FILE", help="append the step summary here (default: $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--no-fix", action="store_true", help="report only: propose and verify no fixes")
    parser.add_argument("--bench", action="store_true", help="benchmark the verified fixes for the pull request body")
    parser.add_argument("--shard", metavar="I/N",
                        help="analyse the I-th of N shares of the targets (shard 1 also the static pass) and write a "
                             "partial report to --partial; graphmend merge joins them and writes the SARIF. No fixes")
    parser.add_argument("--partial", default="graphmend-scan-partial.json", metavar="FILE",
                        help="where --shard writes its partial report (default: graphmend-scan-partial.json)")
    pr = parser.add_argument_group("fix pull request")
    pr.add_argument("--pull-request", action="store_true", help="open / update / close the fix pull request")
    pr.add_argument("--repo", metavar="OWNER/NAME", help="the repository (default: $GITHUB_REPOSITORY)")
    pr.add_argument("--base-branch", metavar="NAME", help="the scanned branch (default: $GITHUB_REF_NAME, else the checkout's branch)")
    pr.add_argument("--branch", metavar="NAME", help="the fix branch (default: graphmend/scan-fixes)")
    pr.add_argument("--api-url", metavar="URL", help="the REST API base URL (default: $GITHUB_API_URL or api.github.com)")
    pr.add_argument("--token-env", default="GITHUB_TOKEN", metavar="NAME", help="the variable holding the token (default: GITHUB_TOKEN)")
    pr.add_argument("--app-id", metavar="ID", help="authenticate as this GitHub App (default: $GRAPHMEND_APP_ID)")
    pr.add_argument("--app-key-file", metavar="FILE", help="the app's private key (PEM); default: $GRAPHMEND_APP_PRIVATE_KEY")
    pr.add_argument("--installation-id", metavar="ID", help="the app's installation (default: looked up from the repository)")


def _git(root: Path, *args: str) -> Optional[str]:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def run(args: argparse.Namespace) -> int:
    from graphmend.scan import render_sarif, scan, summary_markdown

    config = config_from_args(args)
    root = config.root
    if args.shard:
        return _shard(args, config)
    repo = base_branch = base_sha = ""
    credentials: Any = None
    if args.pull_request:  # settle the inputs before the long analysis
        repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
        if "/" not in repo:
            raise UsageError("--pull-request needs the repository: pass --repo OWNER/NAME or set GITHUB_REPOSITORY")
        base_sha = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}") or ""
        if not base_sha:
            raise UsageError(f"{root}: not a git checkout with a commit; the fix pull request needs the scanned commit")
        base_branch = args.base_branch or os.environ.get("GITHUB_REF_NAME") or _git(root, "rev-parse", "--abbrev-ref", "HEAD") or ""
        if not base_branch or base_branch == "HEAD":
            raise UsageError("cannot tell the scanned branch (detached HEAD): pass --base-branch")
        credentials = _credentials(args)  # a missing token or a bad key is reported before the analysis

    result = scan(config, propose_fixes=not args.no_fix, bench=args.bench,
                  progress=lambda m: print(m, file=sys.stderr, flush=True))
    for t in result.report.targets:
        if t.error:
            warn("scan", f"target {t.name}: {t.error.splitlines()[0] if t.error else ''}")
    for e in result.report.errors:
        warn("scan", f"{e.path}: {e.message}")
    sarif_path = Path(args.sarif)
    sarif_path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(sarif_path, render_sarif(result))
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(summary_markdown(result))

    code = result.exit_code
    outcome: Any = None
    pr_error = ""
    if args.pull_request:
        try:
            outcome = _publish(args, result, repo, base_branch, base_sha, root, credentials)
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - GitHub failures: one line, the job fails, the SARIF is kept
            from bot.post import GITHUB_FAILURES

            if not isinstance(exc, GITHUB_FAILURES):
                raise
            pr_error = f"GitHub: {exc}"
            print(f"graphmend scan: error: fix pull request: {pr_error}", file=sys.stderr)
            code = 1
    if summary and (outcome is not None or pr_error):
        with open(summary, "a", encoding="utf-8") as fh:
            if pr_error:
                fh.write("\n**Fix pull request:** not updated (GitHub refused; see the log).\n")
            elif outcome.number:
                fh.write(f"\n**Fix pull request:** #{outcome.number} {outcome.action}.\n")
    breaks = result.report.all_breaks
    if args.format == "json":
        print(json.dumps({
            "breaks": len(breaks), "fixable": sum(1 for b in breaks if b.fixable), "verified_fixes": len(result.fixes),
            "files": [f.path for f in result.files], "withheld": len(result.withheld), "sarif": str(sarif_path),
            "failed": result.failed, "pull_request": None if outcome is None else
            {"action": outcome.action, "number": outcome.number, "commit": outcome.commit},
            "pull_request_error": pr_error or None,
        }, indent=2, sort_keys=True))
    else:
        line = (f"graphmend scan: {len(breaks)} break(s), {len(result.fixes)} verified fix(es) in "
                f"{len(result.files)} file(s); wrote {sarif_path}")
        if outcome is not None:
            line += f"; pull request: {outcome.action}" + (f" #{outcome.number}" if outcome.number else "")
        print(line)
    return code


def _shard(args: argparse.Namespace, config: Any) -> int:
    """``--shard I/N``: one share of the targets, written as a partial report for ``merge``."""
    import dataclasses

    from graphmend.cache import config_digest
    from graphmend.scan import scan_shard
    from graphmend.shard import ShardError, parse, scan_partial

    if args.pull_request:
        raise UsageError("--shard proposes no fixes: open the fix pull request from an unsharded scan")
    try:
        index, count = parse(args.shard)
    except ShardError as exc:
        raise UsageError(str(exc)) from None
    report, shares = scan_shard(config, index, count, progress=lambda m: print(m, file=sys.stderr, flush=True))
    for t in report.targets:
        if t.error:
            warn("scan", f"target {t.name}: {t.error.splitlines()[0]}")
    commit = _git(config.root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}") or ""
    digest = config_digest(dataclasses.replace(config, root=Path(".")))
    out = Path(args.partial)
    out.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(out, json.dumps(scan_partial(report, commit, index, count, digest, shares), sort_keys=True))
    print(f"graphmend scan: shard {index}/{count}: {len(report.targets)} target(s), {len(report.all_breaks)} break(s); "
          f"wrote {out} (join the shards with graphmend merge)")
    return 1 if report.failed else 0


def _credentials(args: argparse.Namespace) -> Any:
    """The GitHub App's credentials (checked now, exchanged after the analysis), or the token."""
    app_id = args.app_id or os.environ.get("GRAPHMEND_APP_ID")
    if app_id:
        from bot.app_auth import AppAuthError, load_credentials

        try:
            return load_credentials(app_id, key_file=args.app_key_file,
                                    installation_id=args.installation_id or os.environ.get("GRAPHMEND_APP_INSTALLATION_ID"))
        except AppAuthError as exc:
            raise UsageError(str(exc)) from None
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"--pull-request needs a token in ${args.token_env} or a GitHub App (--app-id)")
    return token


def _token(args: argparse.Namespace, credentials: Any, repo: str) -> str:
    """A token for the API: the one given, or an installation token minted now (they last an hour,
    and the analysis before this may have taken long)."""
    if isinstance(credentials, str):
        return credentials
    from bot.app_auth import AppAuthError, installation_token

    try:
        return installation_token(credentials, repo, args.api_url)
    except AppAuthError as exc:
        raise UsageError(str(exc)) from None


def _publish(args: argparse.Namespace, result: Any, repo: str, base_branch: str, base_sha: str, root: Path,
             credentials: Any) -> Any:
    from bot import scan_pr
    from bot.post import connect

    paths = [f.path for f in result.files]
    if paths and _git(root, "diff", "--quiet", "HEAD", "--", *paths) is None:
        # The fixes were computed on the working tree; a local edit would ride along in the commit.
        raise UsageError(f"the working tree differs from HEAD in {', '.join(paths)}; scan a clean checkout")
    plan = scan_pr.ScanPlan(
        base_branch=base_branch, base_sha=base_sha,
        files=tuple((f.path, f.content) for f in result.files),
        fixes=tuple(scan_pr.PlannedFix(f.rule, f.title, f.safety, f.file, f.line, f.verification, f.breaks_before,
                                       f.breaks_after, f.max_error, f.benchmark) for f in result.fixes),
        withheld=tuple(result.withheld),
        breaks_found=len(result.report.all_breaks),
    )
    if not plan.files and (result.failed or not result.fixes_sought):
        # A target that could not run found nothing, and a scan that sought no fixes (--no-fix,
        # no targets) cannot tell: neither is "nothing left to fix".
        why = "a target could not run" if result.failed else result.fix_note
        print(f"graphmend scan: {why}: the fix pull request is left as it is", file=sys.stderr)
        return scan_pr.Outcome("none", None, None)
    client = connect(_token(args, credentials, repo), repo, args.api_url)
    return scan_pr.publish(client, plan, args.branch or scan_pr.BRANCH)
