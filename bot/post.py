"""``graphmend post``: put a finished review.json on its pull request.

The stages follow reviewdog: findings → diff filter (``diff_filter``) → renderer (``render``)
→ client (``github_client``). This module never reads the pull request's code and never
imports torch. Everything it posts is recognisable by hidden markers, so a re-run edits or
skips rather than duplicates, and every write that failed transiently is re-checked by
marker before it is sent again (``retry``).

review.json was written next to the pull request's code, so ``post`` recomputes from GitHub
what it can (``from_github``): the base branch's configuration and baseline (contents at the
base SHA GitHub gives for the pull request) decide the policy, ``fail_on`` and which findings
are accepted; findings and fixes are kept only on the pull request's changed files, with
repository-relative paths; the verdict is computed here. What is still the analysis's word
(the findings, fixes and their verification) is labelled so in the check run.

When the token cannot write (a fork's ``pull_request`` run), the findings become workflow
command annotations and the step summary, and the exit code is the gate.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from bot import markers, render
from bot.diff import parse_files
from bot.diff_filter import MAX_INLINE, Placement, Plan, offered_fixes, plan_review
from bot.gate import Verdict, apply_baseline, baseline_fingerprints, compute_verdict
from bot.github_client import GitHubClient, GitHubError, PermissionDenied, Unprocessable
from bot import retry
from bot.retry import RetryLater, TransientError
from bot.review import Review, Settings
from bot.suggest import fixes_digest, split_lines

CHECK_NAME = "GraphMend"
STATUS_CONTEXT = "graphmend/gate"
ANNOTATIONS_PER_CALL = 50  # GitHub's limit per check-run create/update
LOCK_WAITS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # waiting for a racing post's review
_LOUDNESS = ("never", "on-change", "always")  # review.comment, quietest first


def connect(token: str, repository: str, api_url: Optional[str] = None, *,
            max_rate_limit_wait_s: float = retry.Policy.max_rate_limit_wait_s) -> GitHubClient:
    """The client for ``repository`` (``api_url`` defaults to ``GITHUB_API_URL``); a rate limit
    that resets later than ``max_rate_limit_wait_s`` from now ends the run, saying when to retry."""
    return GitHubClient(token, repository, base_url=api_url, policy=retry.Policy(max_rate_limit_wait_s=max_rate_limit_wait_s))


# Failures of GitHub that the poster could not work around: the caller reports them in one line.
GITHUB_FAILURES: tuple[type[BaseException], ...] = (GitHubError, TransientError, RetryLater)


class PostError(Exception):
    """The review cannot be posted as asked (wrong PR, forged SHA); ``str()`` is one line."""


@dataclass(frozen=True)
class PullTarget:
    repository: str
    number: int
    head_sha: str


@dataclass
class PostResult:
    verdict: Verdict
    mode: str = "full"  # full | read-only
    gate: str = ""  # check-run | status | annotations
    review_id: Optional[int] = None
    inline: int = 0
    sticky_id: Optional[int] = None
    deleted_comments: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.passed else 1


# ---------------------------------------------------------------------------------------------
# Which pull request: from the trusted event, never from review.json


def pull_from_event(event_name: str, payload: dict[str, Any], find_by_sha: Callable[[str], Optional[int]]) -> PullTarget:
    repo = ((payload.get("repository") or {}).get("full_name")) or ""
    if event_name in ("pull_request", "pull_request_target"):
        pr = payload.get("pull_request") or {}
        try:
            return PullTarget(repo, int(pr["number"]), str(pr["head"]["sha"]))
        except (KeyError, TypeError, ValueError):
            raise PostError(f"event {event_name}: no pull_request.number / head.sha in the payload") from None
    if event_name == "workflow_run":
        run = payload.get("workflow_run") or {}
        sha = str(run.get("head_sha") or "")
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise PostError("event workflow_run: no head_sha in the payload")
        # workflow_run.pull_requests is empty for pull requests from forks: look it up.
        number = None
        for pr in run.get("pull_requests") or []:
            if ((pr.get("head") or {}).get("sha")) == sha:
                number = int(pr["number"])
        if number is None:
            number = find_by_sha(sha)
        if number is None:
            raise PostError(f"event workflow_run: no open pull request has head {sha[:7]}")
        return PullTarget(repo, number, sha)
    raise PostError(f"event {event_name!r}: expected pull_request, pull_request_target or workflow_run (or pass --pr and --head-sha)")


def committable(pull: Any, repository: str) -> bool:
    """Whether ``/graphmend apply`` may push to the pull request's branch: a branch of this
    repository, or a fork whose author allows edits by maintainers."""
    if pull is None:
        return False
    return pull.head_repo == repository or bool(pull.maintainer_can_modify)


def offered_digest(review: Review) -> str:
    """The digest of the fixes the review offers (``/graphmend apply`` commits only these)."""
    return fixes_digest((f.fingerprint, fix) for f, fix in offered_fixes(review))


def repo_path(path: str) -> Optional[str]:
    """``path`` when it is a normalised repository-relative path (no ``..``, not absolute, no
    backslash or control character), else None."""
    if not path or path.startswith("/") or "\\" in path or any(ord(c) < 32 for c in path):
        return None
    if posixpath.normpath(path) != path or path.split("/")[0] == "..":
        return None
    return path


# ---------------------------------------------------------------------------------------------
# The poster


class Poster:
    def __init__(
        self,
        client: Optional[GitHubClient],
        target: PullTarget,
        *,
        fail_on: Optional[str] = None,
        baseline: Optional[frozenset[str]] = None,
        out: Callable[[str], None] = print,
        summary_path: Optional[Path] = None,
        max_inline: int = MAX_INLINE,
        overrides: Optional[dict[str, Any]] = None,
    ):
        self.client, self.target = client, target
        self.fail_on, self.baseline = fail_on, baseline
        self.out, self.summary_path, self.max_inline = out, summary_path, max_inline
        self.overrides = dict(overrides or {})  # safety / suggestions / comment from the workflow (trusted)
        self.changed: Optional[frozenset[str]] = None  # the pull request's files, once read from GitHub
        self.pull: Optional[Any] = None  # the pull request as GitHub has it (PullInfo), once read
        self.provenance = ""

    def check_head(self, review: Review) -> None:
        if review.head_sha != self.target.head_sha:
            raise PostError(
                f"review.json is for head {review.head_sha[:7]} but the pull request's head is {self.target.head_sha[:7]}: refused"
            )

    def verdict(self, review: Review) -> tuple[Review, Verdict]:
        if self.baseline is not None:
            review = apply_baseline(review, self.baseline)
        return review, compute_verdict(review, self.fail_on)

    def post_offline(self, review: Review, why: str) -> PostResult:
        """No token (or no way to reach GitHub): annotations and the step summary only.

        Nothing can be read from GitHub, so nothing review.json claims loosens the gate: its
        ``fail_on`` counts only when stricter than ``new-breaks``, and no break is accepted
        unless ``--baseline`` gives the base branch's file (``--fail-on`` decides over both)."""
        self.check_head(review)
        notes = []
        if self.fail_on is None:
            asked = review.settings.fail_on
            self.fail_on = asked if asked == "any-break" else "new-breaks"
            if asked == "never":
                notes.append("review.json's fail_on: never is not taken without GitHub's word; pass --fail-on")
        if self.baseline is None:
            self.baseline = frozenset()
            notes.append("no baseline read (no token): pass --baseline with the base branch's file to accept breaks")
        review, verdict = self.verdict(review)
        self._write_summary(review, verdict)
        return self._read_only(review, verdict, PostResult(verdict, notes=notes), why)

    def post(self, review: Review) -> PostResult:
        self.check_head(review)
        notes: list[str] = []
        try:
            files = self.client.list_files(self.target.number)
            review = self.from_github(review, files, notes)
        except PermissionDenied as exc:
            review, verdict = self.verdict(review)
            self._write_summary(review, verdict)
            return self._read_only(review, verdict, PostResult(verdict), str(exc))
        review, verdict = self.verdict(review)
        result = PostResult(verdict, notes=notes)
        self._write_summary(review, verdict)
        try:
            plan = self.plan(review, files)
            self._review(review, verdict, plan, result)
            self._sticky(review, verdict, result, plan.deliveries)
        except PermissionDenied as exc:
            return self._read_only(review, verdict, result, str(exc))
        self._gate(review, verdict, result)
        return result

    # -- stages ---------------------------------------------------------------------------------

    def from_github(self, review: Review, files: list, notes: list[str]) -> Review:
        """``review`` with what GitHub can tell replacing what the artifact claims: the base
        branch's policy and baseline, and only findings and fixes on the changed files."""
        pull = self.pull = self.client.get_pull(self.target.number)
        if pull.base_sha != review.base_sha:
            notes.append(f"review.json was made against base {review.base_sha[:7]}; the pull request's base is "
                         f"{pull.base_sha[:7]}: its policy and baseline are used")
        config, accepted, problem = self._base_scope(pull.base_sha)
        if problem:
            notes.append(problem)
        if self.fail_on is None:
            self.fail_on = config.gate.fail_on
        if self.baseline is None:
            self.baseline = accepted
        # review.json may ask for less than the base branch allows (quieter, fewer or safer
        # suggestions), never for more; the workflow's own flags decide over both.
        asked = review.settings
        settings = Settings(
            safety=self.overrides.get("safety", "safe" if "safe" in (asked.safety, config.fix.safety) else "unsafe"),
            suggestions=self.overrides.get("suggestions", asked.suggestions and config.review.suggestions),
            comment=self.overrides.get("comment", min(asked.comment, config.review.comment, key=_LOUDNESS.index)),
            fail_on=self.fail_on,
        )
        changed = {f.filename for f in files}
        findings, dropped, outside, hidden = [], 0, 0, 0
        for f in review.findings:
            if repo_path(f.file) is None:
                dropped += 1
                continue
            fix = f.fix
            if fix is not None and not all(repo_path(e.file) in changed for e in fix.edits):
                fix, outside = None, outside + 1
                f = dataclasses.replace(f, decline=f.decline or "its fix edits files this pull request does not change")
            unseen = fix and next(filter(None, map(render.hidden_characters, [e.new_text for e in fix.edits]
                                                  + [c.new_text for c in fix.files])), "")
            if unseen:
                # What a reviewer reads of such a line is not what it says (Trojan Source).
                fix, hidden = None, hidden + 1
                f = dataclasses.replace(f, decline=f"its fix writes a character no reader of the review can see ({unseen})")
            findings.append(dataclasses.replace(f, fix=fix))
        if dropped:
            notes.append(f"{dropped} finding(s) in review.json named a path that is not repository-relative; dropped")
        if outside:
            notes.append(f"{outside} fix(es) edit files outside this pull request's changes; not offered")
        if hidden:
            notes.append(f"{hidden} fix(es) write characters a reader cannot see (bidirectional controls, zero-width "
                         "characters); not offered")
        review = dataclasses.replace(review, settings=settings, findings=tuple(findings))
        self.changed = frozenset(changed)
        self.provenance = (
            f"The verdict, the policy (`fail_on: {self.fail_on}`) and the accepted breaks come from the base branch "
            f"(`{pull.base_sha[:7]}`) as GitHub has it; the breaks, fixes and their verification are the analysis "
            "job's report (review.json)."
        )
        return review

    def _base_scope(self, base_sha: str) -> tuple[Any, frozenset[str], str]:
        """The base branch's configuration and baseline, read through the API at ``base_sha``."""
        from graphmend.config import CONFIG_NAMES, Config, ConfigError, load_yaml, parse_config

        config, problem = Config(root=Path(".")), ""
        for name in CONFIG_NAMES:
            text = self.client.file_text(name, base_sha)
            if text is None:
                continue
            try:
                shown = f"{name} at {base_sha[:7]}"
                config = parse_config(load_yaml(text, shown), root=Path("."), shown=shown)
            except ConfigError as exc:
                problem = f"the base branch's configuration is invalid, so the defaults gate: {exc}"
            break
        accepted: frozenset[str] = frozenset()
        try:
            text = self.client.file_text(config.gate.baseline, base_sha) if repo_path(config.gate.baseline) else None
            accepted = baseline_fingerprints(text) if text else frozenset()
        except (ValueError, GitHubError) as exc:
            problem = (problem + "; " if problem else "") + f"the base branch's baseline cannot be read ({exc}); no break is accepted"
        return config, accepted, problem

    def plan(self, review: Review, files: list) -> Plan:
        """Where each finding goes and how each fix is delivered (``/graphmend apply`` plans again
        to read back what the review showed)."""
        diff = parse_files((f.filename, f.status, f.patch) for f in files)
        return plan_review(review, diff, max_inline=self.max_inline, head_lines=self._head_lines(review.head_sha),
                           committable=committable(self.pull, self.target.repository))

    def _head_lines(self, head_sha: str) -> Callable[[str], Optional[list[str]]]:
        """The head's files as GitHub has them (what a suggestion is applied to)."""
        def lines(path: str) -> Optional[list[str]]:
            try:
                text = self.client.file_text(path, head_sha)
            except GitHubError:
                return None
            return None if text is None else split_lines(text)

        return lines

    def _review(self, review: Review, verdict: Verdict, plan: Plan, result: PostResult) -> None:
        n = self.target.number
        comments = self.client.list_review_comments(n)
        replied_to = {c.in_reply_to_id for c in comments if c.in_reply_to_id}
        live: set[str] = set()
        for c in comments:
            fp = markers.find_finding(c.body)
            if fp is None:
                continue
            if c.line is None:
                # Outdated: its line left the diff. Remove it unless someone answered it.
                if c.id not in replied_to:
                    try:
                        self.client.delete_review_comment(c.id)
                        result.deleted_comments += 1
                    except PermissionDenied:
                        # Someone else's comment carrying our marker: not ours to delete,
                        # and no reason to fall back to read-only mode.
                        result.notes.append(f"review comment {c.id} has our marker but is not ours; left alone")
            else:
                live.add(fp)

        reviews = self.client.list_reviews(n)
        for r in reviews:
            if r.state == "PENDING" and markers.find_review(r.body):
                # A pending review of ours (a run that died half-way) blocks a new one (422).
                self.client.delete_pending_review(n, r.id)
        existing = [r.id for r in reviews if r.state != "PENDING" and markers.find_review(r.body) == review.head_sha]
        if existing:
            result.review_id = existing[0]  # every run names the head's one review
            result.notes.append(f"a review for {review.head_sha[:7]} exists already; not posting another")
            return
        if verdict.new == 0:
            return

        todo = [p for p in plan.inline if p.finding.fingerprint not in live]
        if not todo and not plan.body and not plan.patches:
            # Every new break already has its live comment from an earlier head: a review
            # with nothing new in it would only be noise.
            result.notes.append("every new break already has a comment; no review for this head")
            return
        if not self._hold_head_lock(review.head_sha, result):
            return
        moved: tuple[Placement, ...] = ()
        for attempt in range(3):
            body = render.review_body(review, verdict, plan, moved=moved, fixes_digest=offered_digest(review))
            payload = [self._comment(p) for p in todo]
            try:
                result.review_id = self.client.create_review(
                    n, review.head_sha, body, payload, recheck=lambda: self._find_review(review.head_sha)
                )
                result.inline = len(todo)
                return
            except Unprocessable as exc:
                if not todo:
                    raise
                # GitHub refused a comment we placed inside the diff, without saying which one.
                # Try each alone in a pending review (deleted at once) to find it; re-send the
                # review without the refused ones, which go to the body (all, if none is found).
                probe_body = markers.review_marker(review.head_sha)
                bad = [p for p in todo if not self.client.comment_is_accepted(n, review.head_sha, probe_body, self._comment(p))]
                bad = bad or list(todo)
                result.notes.append(f"GitHub refused {len(bad)} inline comment(s): {exc}")
                todo = [p for p in todo if p not in bad]
                moved = moved + tuple(Placement(p.finding, "in-file", False, None, None, "refused by GitHub") for p in bad)
        raise GitHubError("the review was refused three times")

    def _hold_head_lock(self, head_sha: str, result: PostResult) -> bool:
        """Whether this run is the one to post the head's review. Two posts can run at once (a
        re-run racing the first run): the one that creates ``refs/graphmend/post/<number>/<head>``
        posts, the others wait for its review. The lock is the pull request's: one head opened
        against two bases gets a review in each. Without the right to create refs (``contents:
        write``) there is no lock, and the workflow's concurrency group is the only guard."""
        try:
            if self.client.claim(f"refs/graphmend/post/{self.target.number}/{head_sha}", head_sha):
                return True
        except PermissionDenied as exc:
            result.notes.append(f"no lock for this head's review (the token cannot create refs: {exc})")
            return True
        for wait in LOCK_WAITS_S:
            self.client.pause(wait)
            found = self._find_review(head_sha)
            if found is not None:
                result.review_id = found
                result.notes.append(f"another post made the review for {head_sha[:7]}; not posting another")
                return False
        result.notes.append(f"another post holds the lock for {head_sha[:7]} but made no review in "
                            f"{sum(LOCK_WAITS_S):.0f} s; posting")
        return True

    def _comment(self, p: Placement) -> dict:
        # A suggestion sits on its own block's file (a fix may edit another file than its finding's).
        path = p.block.file if p.block is not None else p.finding.file
        c: dict[str, Any] = {"path": path, "line": p.line, "side": "RIGHT", "body": render.inline_comment(p)}
        if p.start_line is not None and p.line is not None and p.start_line < p.line:
            c["start_line"] = p.start_line
            c["start_side"] = "RIGHT"
        return c

    def _find_review(self, head_sha: str) -> Optional[int]:
        for r in self.client.list_reviews(self.target.number):
            if r.state != "PENDING" and markers.find_review(r.body) == head_sha:
                return r.id
        return None

    def _sticky_candidates(self) -> list[tuple[int, str]]:
        """Comments carrying the sticky marker, bots' first: a person can paste our marker,
        but only an app's token comments as a Bot."""
        found = [c for c in self.client.list_issue_comments(self.target.number) if markers.is_sticky(c.body)]
        found.sort(key=lambda c: (c.user_type != "Bot", c.id))
        return [(c.id, c.body) for c in found]

    def _sticky(self, review: Review, verdict: Verdict, result: PostResult, deliveries: Optional[dict] = None) -> None:
        mode = review.settings.comment
        if mode == "never":
            return
        body = render.sticky_body(review, verdict, deliveries)
        candidates = self._sticky_candidates()
        for cid, old in candidates:
            if mode == "on-change" and old == body:
                result.sticky_id = cid
                return
            try:
                self.client.edit_issue_comment(cid, body)
                result.sticky_id = cid
                return
            except PermissionDenied:
                # Our marker on a comment we cannot edit: not ours. Try the next one.
                result.notes.append(f"issue comment {cid} carries the sticky marker but is not ours")
        something = verdict.new or verdict.fixed or verdict.failed_targets or any(t.benchmark for t in review.targets)
        if mode == "always" or something or candidates:
            def recheck() -> Optional[int]:
                mine = [cid for cid, old in self._sticky_candidates() if old == body]
                return mine[0] if mine else None

            created = self.client.create_issue_comment(self.target.number, body, recheck)
            result.sticky_id = self._one_sticky(created, result)

    def _one_sticky(self, created: int, result: PostResult) -> int:
        """After creating a sticky comment, the one to keep: posts that raced each created one,
        and every one of them sees the earliest (lowest id) of its own author's, so each later
        duplicate deletes itself and the earliest stays."""
        found = [c for c in self.client.list_issue_comments(self.target.number) if markers.is_sticky(c.body)]
        mine = next((c for c in found if c.id == created), None)
        if mine is None:
            return created
        earlier = [c.id for c in found if c.user_login == mine.user_login and c.id < created]
        if not earlier:
            return created
        self.client.delete_issue_comment(created)
        result.notes.append(f"a racing post made the sticky comment first; removed this run's duplicate {created}")
        return min(earlier)

    def _gate(self, review: Review, verdict: Verdict, result: PostResult) -> None:
        # Annotations only on the pull request's own files; the summary lists every new break.
        anns = [a for a in render.annotations(review, verdict) if self.changed is None or a["path"] in self.changed]
        title = render.headline(verdict)
        summary = render.check_summary(review, verdict, self.provenance)  # the check's page shows the whole story
        nonce = os.urandom(6).hex()  # tells this run's check run apart when re-checking after a 502
        payload = {
            "name": CHECK_NAME,
            "head_sha": review.head_sha,
            "status": "completed",
            "conclusion": "success" if verdict.passed else "failure",
            "external_id": f"{review.head_sha}:{nonce}",
            "output": {"title": title, "summary": summary, "annotations": anns[:ANNOTATIONS_PER_CALL]},
        }

        def recheck() -> Optional[int]:
            for run in self.client.list_check_runs(review.head_sha, CHECK_NAME):
                if run.external_id == payload["external_id"]:
                    return run.id
            return None

        try:
            check_id = self.client.create_check_run(payload, recheck)
            for start in range(ANNOTATIONS_PER_CALL, len(anns), ANNOTATIONS_PER_CALL):
                page = anns[start : start + ANNOTATIONS_PER_CALL]
                self.client.add_annotations(check_id, {"output": {"title": title, "summary": summary, "annotations": page}},
                                            expected_total=start + len(page))
            result.gate = "check-run"
            return
        except PermissionDenied as exc:
            result.notes.append(f"cannot write check runs ({exc}); using a commit status")
        try:
            state = "success" if verdict.passed else "failure"
            self.client.create_status(review.head_sha, state, STATUS_CONTEXT, title)
            result.gate = "status"
        except PermissionDenied as exc:
            result.notes.append(f"cannot write commit statuses ({exc}); using annotations")
            self._annotate(review, verdict)
            result.gate = "annotations"

    def _read_only(self, review: Review, verdict: Verdict, result: PostResult, why: str) -> PostResult:
        result.mode = "read-only"
        result.gate = "annotations"
        result.notes.append(f"the token cannot write to the pull request ({why}); annotations and the step summary only")
        self._annotate(review, verdict)
        return result

    def _annotate(self, review: Review, verdict: Verdict) -> None:
        for line in render.workflow_commands(review, verdict):
            self.out(line)

    def _write_summary(self, review: Review, verdict: Verdict) -> None:
        if self.summary_path is None:
            return
        with open(self.summary_path, "a", encoding="utf-8") as fh:
            fh.write(render.summary_markdown(review, verdict))
