"""The scan's fix pull request: one branch, one pull request, one commit, kept up to date.

``graphmend scan`` finds the fixes that verify on the default branch; this module puts them in
front of people. The commit is made through the Git Data API (blobs -> tree on the default
branch's tree -> a commit whose only parent is the scanned commit -> the branch ref), never with
a local push, so the job needs no git credentials, only an API token.

Every scan rebuilds that single commit on the commit it scanned and force-moves the branch:
the pull request always shows exactly the fixes verified on the current default branch, never
a pile of commits. When the rebuilt tree is the one already on the branch (same tree, same
parent) nothing is pushed, so re-runs do not re-trigger CI. When nothing is left to fix (the
fixes were merged, or the code changed), the open pull request is closed with a comment. A
pull request that a person closed is not opened again for the same fixes.

The pull request is recognised by its branch (of this repository, not a fork's namesake); the
body carries a hidden marker and every text that comes from the analysed code is escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bot.render import BODY_LIMIT, escape, short

BRANCH = "graphmend/scan-fixes"
MARKER = "<!-- graphmend:scan-pr -->"
CLOSED_MARKER = "<!-- graphmend:scan-pr-closed -->"
SETTING_NOTE = (
    "A pull request opened with the workflow's `GITHUB_TOKEN` starts no workflows, and Actions may only open it "
    "when the repository allows it (Settings → Actions → General → Allow GitHub Actions to create and approve "
    "pull requests); authenticate as a GitHub App to have CI run on it."
)


@dataclass(frozen=True)
class PlannedFix:
    rule: str
    title: str
    safety: str
    file: str
    line: int
    verification: str
    breaks_before: Optional[int] = None
    breaks_after: Optional[int] = None
    max_error: Optional[float] = None
    benchmark: str = ""


@dataclass(frozen=True)
class Withheld:
    """A proposed fix that is not in the pull request, and why."""

    rule: str
    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class ScanPlan:
    """What to propose: the new text of every file the verified fixes touch, on ``base_sha``."""

    base_branch: str
    base_sha: str
    files: tuple[tuple[str, str], ...]  # (repo-relative path, full new text)
    fixes: tuple[PlannedFix, ...]
    withheld: tuple[Withheld, ...] = ()
    breaks_found: int = 0


@dataclass(frozen=True)
class Outcome:
    action: str  # "opened" | "updated" | "unchanged" | "closed" | "declined" | "none"
    number: Optional[int]
    commit: Optional[str]


def _num(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.3g}"


def title(plan: ScanPlan) -> str:
    n = len(plan.fixes)
    return f"GraphMend: {n} verified graph-break fix{'es' if n != 1 else ''}"


def commit_message(plan: ScanPlan) -> str:
    lines = [title(plan), ""]
    lines += [f"- {f.file}:{f.line} {f.rule}: {' '.join(f.title.split())[:200]}" for f in plan.fixes]
    lines += ["", f"Verified on {plan.base_branch} at {plan.base_sha}."]
    return "\n".join(lines) + "\n"


def body(plan: ScanPlan) -> str:
    """The pull request's body: each fix with its verification and benchmark."""
    out = [MARKER, f"## {title(plan)}", ""]
    out.append(f"A scan of `{escape(plan.base_branch, 100)}` at `{short(plan.base_sha)}` found "
               f"{plan.breaks_found} graph break(s). Every fix below passed verification on the repository's own "
               "targets: the same outputs on the same weights and inputs, alone and together with the others.")
    out.append("")
    out += ["| where | rule | fix | safety | verification | breaks before → after (all fixes) | max error | benchmark |",
            "|---|---|---|---|---|---|---|---|"]
    for f in plan.fixes:
        counts = f"{_num(f.breaks_before)} → {_num(f.breaks_after)}"
        out.append(f"| `{escape(f.file, 200)}:{f.line}` | {escape(f.rule, 10)} | {escape(f.title)} | {escape(f.safety, 20)} "
                   f"| {escape(f.verification)} | {counts} | {_num(f.max_error)} | {escape(f.benchmark) or 'not run'} |")
    out.append("")
    if plan.withheld:
        out += ["<details><summary>Proposed but not included</summary>", ""]
        out += [f"- `{escape(w.file, 200)}:{w.line}` {escape(w.rule, 10)}: {escape(w.reason)}" for w in plan.withheld]
        out += ["", "</details>", ""]
    out.append("The next scan updates this pull request (the branch is rebuilt on the default branch and "
               "force-updated); when nothing is left to fix, it is closed.")
    text = "\n".join(out) + "\n"
    if len(text) > BODY_LIMIT:
        text = text[: BODY_LIMIT - 40] + "\n\n… (truncated)\n"
    return text


def close_comment(base_branch: str, base_sha: str) -> str:
    return (f"{CLOSED_MARKER}\nNothing is left to fix: a scan of `{escape(base_branch, 100)}` at `{short(base_sha)}` "
            "found no graph break with a verified fix. Closing this pull request; a later scan opens a new one "
            "when there is something to fix.\n")


def publish(client, plan: ScanPlan, branch: str = BRANCH) -> Outcome:
    """Open, update or close the scan's pull request so that it holds ``plan``'s fixes."""
    pulls = client.find_pulls_from_branch(branch)
    pull = pulls[0] if pulls else None
    if not plan.files:
        if pull is None:
            return Outcome("none", None, None)
        text = close_comment(plan.base_branch, plan.base_sha)

        def already() -> Optional[int]:
            return next((c.id for c in client.list_issue_comments(pull.number) if CLOSED_MARKER in c.body), None)

        if already() is None:
            client.create_issue_comment(pull.number, text, already)
        client.update_pull(pull.number, state="closed")
        return Outcome("closed", pull.number, None)

    base_tree, _ = client.git_commit(plan.base_sha)
    modes = client.tree_modes(base_tree)
    entries = [{"path": path, "mode": modes.get(path, "100644"), "type": "blob",
                "sha": client.create_blob(content.encode("utf-8"))} for path, content in sorted(plan.files)]
    tree = client.create_tree(base_tree, entries)
    current = client.branch_sha(branch)
    if pull is None and current is not None and client.git_commit(current)[0] == tree:
        # The same fixes are on the branch but no pull request is open: if a person closed ours
        # without merging, that was an answer; do not open it again until the fixes change.
        closed = client.find_pulls_from_branch(branch, state="closed")
        if closed and not any(CLOSED_MARKER in c.body for c in client.list_issue_comments(closed[-1].number)):
            return Outcome("declined", closed[-1].number, current)
    commit: Optional[str] = None
    if current is not None and client.git_commit(current) == (tree, (plan.base_sha,)):
        commit = current  # the same fixes on the same base: nothing to push, no CI re-run
    else:
        commit = client.create_commit(commit_message(plan), tree, [plan.base_sha])
        if current is None:
            client.create_branch(branch, commit)
        else:
            client.force_update_branch(branch, commit)
    text = body(plan)
    if pull is not None:
        client.update_pull(pull.number, title=title(plan), body=text)
        return Outcome("updated" if commit != current else "unchanged", pull.number, commit)
    number = client.create_pull(title(plan), branch, plan.base_branch, text)
    return Outcome("opened", number, commit)
