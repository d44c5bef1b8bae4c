"""``/graphmend apply``: commit the latest verified fixes to the pull request's branch.

In the manner of autofix.ci and pre-commit.ci, a comment ``/graphmend apply`` on a pull request
makes the bot commit the fixes its review offered for the current head. This runs in a job
that holds a write token (an ``issue_comment`` workflow), so it never runs the pull request's
code; it only moves text, and trusts nothing it does not check:

- who asked: the comment is read back through the API by id, and its author's permission on
  the repository comes from GitHub (``GET /repos/{o}/{r}/collaborators/{u}/permission``):
  ``admin`` or ``write`` (maintain counts as write), never the comment's text or
  ``author_association``;
- what to commit: review.json (the analysis job's artifact, untrusted) is validated, scoped to
  the pull request's changed files and the base branch's policy exactly as ``graphmend post``
  scopes it, and its offered fixes must hash to the digest recorded in the bot's review for this
  head (so a fix that changed since the maintainer read it is refused), and each must stand in
  full in that review as GitHub has it now (``bot.shown``: its own suggestions on their exact
  lines with their exact text, or its whole patch), so nothing a maintainer could not read is
  committed;
- when: the review must have been posted before the command (a head pushed meanwhile brings a
  review its author could not have read when they asked);
- where: the head SHA GitHub reports must be the analysed one (a stale head is refused), every
  edit must apply exactly to the head's files fetched through the API, only ``.py`` files are
  written, and the branch moves only as a fast-forward (``force: false``);
- which branch: one of this repository, or a fork whose author allowed edits by maintainers;
  otherwise the reply carries the patch and says why.

Every outcome is answered on the pull request (an issue comment) and with a reaction.
"""

from __future__ import annotations

import difflib
from datetime import datetime
from dataclasses import dataclass
from typing import Callable, Optional

from bot import markers, render
from bot.diff_filter import offered_fixes
from bot.github_client import GitHubClient, GitHubError, ReviewInfo, Unprocessable
from bot.post import Poster, PullTarget, committable, offered_digest, repo_path
from bot.review import FileChange, FixProposal, Review
from bot.shown import read_review, why_not_shown
from bot.suggest import EditError, apply_line_edits, files_needed
from graphmend.sources import split_lines

COMMAND = "/graphmend apply"
WRITERS = ("admin", "maintain", "write")
MAX_FILES = 200


class ApplyRefused(Exception):
    """The fixes cannot be committed; ``str()`` is the reply's one-line reason, ``details`` one
    line per fix it concerns."""

    def __init__(self, reason: str, details: tuple[str, ...] = ()):
        super().__init__(reason)
        self.details = details


@dataclass
class ApplyResult:
    outcome: str  # committed | refused | patch | ignored
    reason: str = ""
    commit_sha: Optional[str] = None
    reply_id: Optional[int] = None
    files: tuple[str, ...] = ()
    not_shown: tuple[str, ...] = ()  # "file:line RULE: why" of each fix the review did not show in full


def is_command(body: str) -> bool:
    """Whether a comment asks for ``/graphmend apply`` (its first non-empty line, exactly)."""
    first = next((line.strip() for line in body.splitlines() if line.strip()), "")
    return first == COMMAND


class Applier:
    def __init__(self, client: GitHubClient, number: int, comment_id: int, *,
                 head_client: Optional[Callable[[str], GitHubClient]] = None):
        self.client, self.number, self.comment_id = client, number, comment_id
        # A fork's branch lives in the fork: a client for that repository (None: cannot push there).
        self.head_client = head_client

    def run(self, review: Review) -> ApplyResult:
        comment = self.client.get_issue_comment(self.comment_id)
        if not is_command(comment.body):
            return ApplyResult("ignored", "the comment does not ask for /graphmend apply")
        who = comment.user_login
        permission = self.client.collaborator_permission(who) if who else "none"
        if permission not in WRITERS:
            return self._answer(ApplyResult("refused", f"{who or 'the commenter'} has {permission} permission on this "
                                            "repository; committing needs write permission"))
        try:
            return self._apply(review, who, comment.created_at)
        except ApplyRefused as exc:
            return self._answer(ApplyResult("refused", str(exc), not_shown=exc.details))

    # -- the steps ------------------------------------------------------------------------------

    def _apply(self, review: Review, who: str, asked_at: str) -> ApplyResult:
        pull = self.client.get_pull(self.number)
        if pull.state != "open":
            raise ApplyRefused("the pull request is not open")
        if review.head_sha != pull.head_sha:
            raise ApplyRefused(f"the analysis is for {review.head_sha[:7]} but the branch is at {pull.head_sha[:7]}: wait "
                               "for the analysis of the new head, then comment again")
        poster = Poster(self.client, PullTarget(self.client.repository, self.number, pull.head_sha))
        notes: list[str] = []
        files = self.client.list_files(self.number)
        review = poster.from_github(review, files, notes)
        review, _verdict = poster.verdict(review)
        fixes = offered_fixes(review)
        if not fixes:
            raise ApplyRefused(f"the analysis of {pull.head_sha[:7]} has no verified fix to commit")
        posted = self._posted_review(pull.head_sha)
        if posted is None:
            raise ApplyRefused(f"GraphMend has not reviewed {pull.head_sha[:7]} yet: wait for its review, then comment again")
        if not _before(posted.submitted_at, asked_at):
            # The command approves what its author could read: a review of a head pushed since is not that.
            raise ApplyRefused(f"the review of {pull.head_sha[:7]} was posted after the command (the branch moved "
                               "meanwhile?): read it, then comment again")
        if markers.find_fixes(posted.body) != offered_digest(review):
            raise ApplyRefused("the fixes in the analysis are not the ones the review for this head offered: refused")
        deliveries = poster.plan(review, files).deliveries
        shown = read_review(posted.body, [c for c in self.client.list_review_comments(self.number) if c.review_id == posted.id])
        unseen = [(f, fx, why) for f, fx in fixes if (why := why_not_shown(fx, deliveries.get(f.fingerprint), shown))]
        if unseen:
            raise ApplyRefused(f"{len(unseen)} fix(es) were never shown in full in the review for this head, and only "
                               "what a maintainer could read is committed; nothing was committed (run `graphmend fix` "
                               "locally, or commit the suggestions that are shown)",
                               tuple(f"{f.file}:{f.line} {fx.rule}: {why}" for f, fx, why in unseen))
        changes = self._changes(pull.head_sha, [fx for _, fx in fixes])
        if not changes:
            raise ApplyRefused("the fixes change nothing at the head")
        if not committable(pull, self.client.repository):
            return self._answer(ApplyResult(
                "patch", "this pull request comes from a fork whose author did not allow edits by maintainers, so the "
                "bot cannot push to its branch; apply the patch below (git apply)", files=tuple(sorted(changes))),
                patch=unified_patch(changes))
        target = self.client
        if pull.head_repo != self.client.repository:
            if self.head_client is None:
                raise ApplyRefused(f"the branch is in the fork {pull.head_repo}, which this token cannot push to")
            target = self.head_client(pull.head_repo)
        sha = self._commit(target, pull.head_sha, pull.head_ref, changes, fixes, who)
        return self._answer(ApplyResult("committed", f"committed {sha[:7]} to {pull.head_ref}", sha,
                                        files=tuple(sorted(changes))), fixes=fixes)

    def _posted_review(self, head_sha: str) -> Optional[ReviewInfo]:
        """The bot's review of ``head_sha`` that carries a fixes digest (the latest, if several).
        Only an app's review counts: a person (the pull request's author too) can post a review
        with our markers, never one as a bot."""
        found = None
        for r in self.client.list_reviews(self.number):
            if (r.state != "PENDING" and r.user_type == "Bot" and r.user_login.endswith("[bot]")
                    and markers.find_review(r.body) == head_sha and markers.find_fixes(r.body)):
                found = r
        return found

    def _changes(self, head_sha: str, fixes: list[FixProposal]) -> dict[str, tuple[Optional[str], str]]:
        """path -> (text at the head or None, new text) of every file the fixes change, from the
        head's files as GitHub has them."""
        by_file: dict[str, list] = {}
        for fx in fixes:
            for e in fx.edits:
                by_file.setdefault(e.file, []).append(e)
        out: dict[str, tuple[Optional[str], str]] = {}
        for path in sorted(by_file):
            self._check_path(path)
            clash = overlap(by_file[path])
            if clash:
                raise ApplyRefused(f"the fixes' edits of {render.plain(path, 200)} overlap ({clash}): committed together "
                                   "they write a text that no patch or suggestion of the review shows")
            try:
                text = self.client.file_text(path, head_sha)
            except GitHubError as exc:
                raise ApplyRefused(f"{path} cannot be read at the head ({exc})") from None
            if text is None:
                raise ApplyRefused(f"{path} is not in the head {head_sha[:7]}")
            try:
                new = apply_line_edits(text, by_file[path])
            except EditError as exc:
                raise ApplyRefused(f"the fixes no longer apply to the head's files: {exc}") from None
            if new != text:
                out[path] = (text, new)
        for fc in files_needed(fixes):
            self._check_path(fc.path)
            self._file_change(fc, head_sha, out)
        if len(out) > MAX_FILES:
            raise ApplyRefused(f"the fixes change {len(out)} files; at most {MAX_FILES} are committed at once")
        return out

    def _file_change(self, fc: FileChange, head_sha: str, out: dict[str, tuple[Optional[str], str]]) -> None:
        if fc.path in out:
            raise ApplyRefused(f"{fc.path} is both edited and written whole by the fixes")
        if fc.new_text != own_runtime_text():
            # The only whole file a fix writes is GraphMend's runtime module: exactly this
            # GraphMend's copy, whatever review.json says.
            raise ApplyRefused(f"{fc.path} is not the runtime module this GraphMend writes (run the analysis with "
                               "the same GraphMend version as this workflow)")
        try:
            current = self.client.file_text(fc.path, head_sha)
        except GitHubError as exc:
            raise ApplyRefused(f"{fc.path} cannot be read at the head ({exc})") from None
        if current == fc.new_text:
            return
        if fc.status == "created" and current is not None:
            raise ApplyRefused(f"{fc.path} exists at the head but the fixes would create it: run the analysis again")
        if fc.status == "updated" and current is None:
            raise ApplyRefused(f"{fc.path} is not at the head but the fixes would update it: run the analysis again")
        out[fc.path] = (current, fc.new_text)

    @staticmethod
    def _check_path(path: str) -> None:
        if repo_path(path) is None or not path.endswith(".py") or path.split("/")[0] == ".github":
            raise ApplyRefused(f"the fixes name a path the bot does not write ({render.plain(path, 200)})")

    def _commit(self, client: GitHubClient, head_sha: str, branch: str, changes: dict[str, tuple[Optional[str], str]],
                fixes: list, who: str) -> str:
        tree, _parents = client.git_commit(head_sha)
        modes = client.tree_modes(tree)
        links = [p for p in sorted(changes) if modes.get(p, "100644") not in ("100644", "100755")]
        if links:
            # A symlink (120000): a blob written there stays a link, its target the new text.
            raise ApplyRefused(f"{render.plain(links[0], 200)} is a symlink at the head (mode {modes[links[0]]}), "
                               "which the bot never writes through")
        entries = []
        for path in sorted(changes):
            blob = client.create_blob(changes[path][1].encode("utf-8"))
            entries.append({"path": path, "mode": modes.get(path, "100644"), "type": "blob", "sha": blob})
        new_tree = client.create_tree(tree, entries)
        lines = [f"- {f.file}:{f.line} {fx.rule}: {render.plain(fx.title, 200)}" for f, fx in fixes]
        message = (f"Apply GraphMend's verified fixes to {head_sha[:7]}\n\n"
                   f"Asked for by {render.plain(who, 100)} with /graphmend apply on #{self.number}.\n\n" + "\n".join(lines) + "\n")
        sha = client.create_commit(message, new_tree, [head_sha])
        try:
            client.fast_forward_branch(branch, sha)
        except Unprocessable:
            raise ApplyRefused(f"{branch} moved while the fixes were being committed: nothing was pushed; comment "
                               "again once the new head is analysed") from None
        return sha

    # -- the answer -----------------------------------------------------------------------------

    def _answer(self, result: ApplyResult, *, patch: str = "", fixes: list = ()) -> ApplyResult:
        icon = {"committed": "✅", "patch": "📋"}.get(result.outcome, "⚠️")
        lines = [f"{icon} `/graphmend apply`: {render.escape(result.reason, 600)}."]
        if fixes:
            lines += [""] + [f"- {render.code_span(f'{f.file}:{f.line}')} {render.rule_link(fx.rule)} "
                             f"{render.escape(fx.title, 200)}" for f, fx in fixes]
            lines += ["", "The analysis runs again on the new head."]
        if result.not_shown:
            lines += [""] + [f"- {render.escape(d, 600)}" for d in result.not_shown[:20]]
            if len(result.not_shown) > 20:
                lines.append(f"- …and {len(result.not_shown) - 20} more")
        if result.files and result.outcome == "committed":
            lines += ["", "Files: " + ", ".join(render.code_span(p) for p in result.files)]
        if patch:
            lines += ["", render.fence(patch[: render.BODY_LIMIT - 2000], "diff")]
        body = "\n".join(lines) + "\n"
        result.reply_id = self.client.create_issue_comment(self.number, body, recheck=lambda: None)
        try:
            self.client.add_reaction(self.comment_id, "+1" if result.outcome == "committed" else "confused")
        except GitHubError:
            pass  # a reaction is a courtesy; the reply says everything
        return result



def overlap(edits: list) -> str:
    """"" when no two distinct edits (in one file's original line numbers) touch the same lines;
    else which do. Two replacements that share a line, or an insertion inside a replaced range,
    overlap: applied together they write something neither shows (the lines each removes no
    longer line up). Insertions at one point do not: each one's lines land whole."""
    unique: list = []
    for e in edits:
        if e not in unique:
            unique.append(e)
    reach, by = 0, None  # the furthest line replaced so far, and by which edit
    for e in sorted(unique, key=lambda e: (e.start_line, e.end_line >= e.start_line)):
        replaces = e.end_line >= e.start_line
        if by is not None and reach >= e.start_line:
            return f"lines {by.start_line}-{by.end_line} and {'lines' if replaces else 'an insertion at line'} " \
                   f"{e.start_line}{f'-{e.end_line}' if replaces else ''}"
        if replaces and e.end_line > reach:
            reach, by = e.end_line, e
    return ""


def _before(submitted_at: str, asked_at: str) -> bool:
    """Whether a review submitted at ``submitted_at`` existed when the command was given at
    ``asked_at`` (ISO 8601 times from GitHub, to the second: the same second counts as before).
    A time that is missing or unreadable proves nothing: False."""
    try:
        return datetime.fromisoformat(submitted_at) <= datetime.fromisoformat(asked_at)
    except (TypeError, ValueError):
        return False


def unified_patch(changes: dict[str, tuple[Optional[str], str]]) -> str:
    """The changes as one patch ``git apply`` takes (each shared edit once)."""
    out = []
    for path in sorted(changes):
        old, new = changes[path]
        out += difflib.unified_diff(split_lines(old or ""), split_lines(new),
                                    "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


def own_runtime_text() -> Optional[str]:
    """The stamped runtime module this GraphMend writes into a repository (None when this
    version has none). Imports neither torch nor libcst."""
    try:
        from graphmend.transforms._runtime_copy import stamped
    except ImportError:
        return None
    return stamped()
