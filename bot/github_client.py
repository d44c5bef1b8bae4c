"""The GitHub client: the one module of GraphMend that imports ``github`` (PyGithub).

It turns PyGithub objects into the plain values below so that nothing else handles them,
and PyGithub's errors into four kinds the rest of the bot acts on:

- ``TransientError`` (5xx, secondary rate limit, lost connection): retried by ``retry``;
- ``PermissionDenied`` (403 without a rate limit: a read-only token, e.g. a fork's PR);
- ``Unprocessable`` (422: GitHub refused the content, e.g. a comment outside the diff);
- ``NotFound`` (404).

PyGithub's own retries and request throttling are turned off (see ``retry``): its default
retries POSTs and sleeps 60 s on a secondary rate limit. The base URL is ``GITHUB_API_URL``
when set (GitHub Enterprise Server), else api.github.com; authentication is a token (a GitHub
App's installation token comes from ``installation_token``, at the end of this module).
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import requests
from github import Auth, Github, GithubException

from bot import retry
from bot.retry import TransientError

T = TypeVar("T")
DEFAULT_API_URL = "https://api.github.com"


class GitHubError(Exception):
    """A GitHub answer the bot cannot work around; ``str()`` is one line."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class PermissionDenied(GitHubError):
    pass


class Unprocessable(GitHubError):
    pass


class NotFound(GitHubError):
    pass


@dataclass(frozen=True)
class PullInfo:
    number: int
    head_sha: str
    base_sha: str
    head_repo: str
    base_repo: str
    state: str
    head_ref: str = ""
    maintainer_can_modify: bool = False


@dataclass(frozen=True)
class FileInfo:
    filename: str
    status: str
    patch: Optional[str]


@dataclass(frozen=True)
class ReviewInfo:
    id: int
    state: str
    body: str
    commit_id: Optional[str]
    user_login: str = ""
    user_type: str = ""  # "Bot" for an app's (the bot's) review, "User" for a person's
    submitted_at: str = ""  # ISO 8601, as GitHub gives it ("" for a pending review)


@dataclass(frozen=True)
class ReviewCommentInfo:
    id: int
    body: str
    path: str
    line: Optional[int]  # None when the comment is outdated (its line left the diff)
    commit_id: Optional[str]
    in_reply_to_id: Optional[int]
    review_id: Optional[int] = None  # the review it was posted with
    start_line: Optional[int] = None  # a multi-line comment's first line (None: one line)
    side: Optional[str] = None  # RIGHT: the head's side of the diff
    start_side: Optional[str] = None


@dataclass(frozen=True)
class IssueCommentInfo:
    id: int
    body: str
    user_login: str = ""
    user_type: str = ""
    created_at: str = ""  # ISO 8601, as GitHub gives it


@dataclass(frozen=True)
class CheckRunInfo:
    id: int
    name: str
    external_id: Optional[str]


def api_url_from_env() -> str:
    return os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL


def _message(exc: GithubException) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    text = str(data.get("message") or exc.message or "")
    errors = data.get("errors")
    if errors:
        text += " (" + "; ".join(str(e.get("message", e) if isinstance(e, dict) else e) for e in errors) + ")"
    return " ".join(text.split())[:500] or f"HTTP {exc.status}"


def rate_limit_wait(status: int, headers: dict[str, str], message: str, now: Optional[float] = None) -> Optional[float]:
    """Seconds GitHub asks to wait when an answer is a rate limit, else None (headers in lower
    case). Primary limit spent: until ``x-ratelimit-reset``; secondary: ``retry-after``, or at
    least a minute when it gives none (GitHub's documented behaviour)."""
    if status not in (403, 429):
        return None
    retry_after = headers.get("retry-after", "")
    reset = headers.get("x-ratelimit-reset", "")
    if headers.get("x-ratelimit-remaining") == "0" and reset.isdigit():
        return max(0.0, int(reset) - (time.time() if now is None else now))
    if retry_after.isdigit():
        return float(retry_after)
    if status == 429 or "rate limit" in message.lower():
        return 60.0
    return None


def translate(exc: BaseException) -> BaseException:
    """A PyGithub / requests exception as one of this module's kinds."""
    if isinstance(exc, requests.RequestException):
        return TransientError(f"connection problem: {exc.__class__.__name__}", wait_s=1.0)
    if not isinstance(exc, GithubException):
        return exc
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    msg = _message(exc)
    status = exc.status
    limited = rate_limit_wait(status, headers, msg)
    if limited is not None:
        kind = "primary" if headers.get("x-ratelimit-remaining") == "0" else "secondary"
        return TransientError(f"{kind} rate limit (HTTP {status}): {msg}", wait_s=limited, rate_limit=True)
    if status >= 500:
        return TransientError(f"HTTP {status}: {msg}", wait_s=1.0)
    if status in (401, 403):
        return PermissionDenied(f"HTTP {status}: {msg}", status)
    if status == 404:
        return NotFound(f"HTTP {status}: {msg}", status)
    if status == 422:
        return Unprocessable(f"HTTP 422: {msg}", status)
    return GitHubError(f"HTTP {status}: {msg}", status)


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (GithubException, requests.RequestException) as exc:
        raise translate(exc) from None


class GitHubClient:
    """The few GitHub operations the bot needs, on one repository, as plain values."""

    def __init__(
        self,
        token: str,
        repository: str,
        *,
        base_url: Optional[str] = None,
        policy: retry.Policy = retry.Policy(),
        sleep: Optional[Callable[[float], None]] = None,
        per_page: int = 100,
    ):
        self.repository = repository
        self.policy = policy
        self._sleep = sleep or __import__("time").sleep
        self._gh = Github(
            auth=Auth.Token(token),
            base_url=(base_url or api_url_from_env()).rstrip("/"),
            retry=None,  # our policy, not PyGithub's (which re-POSTs and sleeps 60 s)
            seconds_between_requests=None,
            seconds_between_writes=None,
            per_page=per_page,
            lazy=True,  # no request until a value is needed: fewer calls, fewer failure points
            timeout=30,
        )
        self._repo = self._gh.get_repo(repository)

    # -- plumbing -------------------------------------------------------------------------------

    def pause(self, seconds: float) -> None:
        """Sleep with the client's clock (tests pass one that does not wait)."""
        self._sleep(seconds)

    def _read(self, fn: Callable[[], T]) -> T:
        return retry.read(lambda: _call(fn), self.policy, self._sleep)

    def _write(self, fn: Callable[[], T], recheck: Optional[Callable[[], Optional[T]]] = None) -> T:
        return retry.write(lambda: _call(fn), (lambda: _call(recheck)) if recheck else None, self.policy, self._sleep)

    def _pull(self, number: int) -> Any:
        return self._repo.get_pull(number)  # lazy: no request yet

    def _request(self, verb: str, url: str, payload: Optional[dict] = None) -> Any:
        _headers, data = self._repo._requester.requestJsonAndCheck(verb, url, input=payload)
        return data

    # -- pulls ----------------------------------------------------------------------------------

    def get_pull(self, number: int) -> PullInfo:
        def fetch() -> PullInfo:
            data = self._request("GET", f"{self._repo.url}/pulls/{number}")
            return PullInfo(
                number=data["number"],
                head_sha=data["head"]["sha"],
                base_sha=data["base"]["sha"],
                head_repo=((data["head"].get("repo") or {}).get("full_name")) or "",
                base_repo=((data["base"].get("repo") or {}).get("full_name")) or "",
                state=data["state"],
                head_ref=str(data["head"].get("ref") or ""),
                maintainer_can_modify=bool(data.get("maintainer_can_modify")),
            )

        return self._read(fetch)

    def find_pull_by_head_sha(self, sha: str) -> Optional[int]:
        """The open pull request whose head is ``sha`` (``workflow_run.pull_requests`` is empty for forks)."""
        def fetch() -> Optional[int]:
            for pull in self._repo.get_pulls(state="open"):
                if pull.head.sha == sha:
                    return pull.number
            return None

        return self._read(fetch)

    def file_text(self, path: str, ref: str, limit: int = 1_000_000) -> Optional[str]:
        """The UTF-8 text of the file ``path`` at commit ``ref``, or None when there is no such
        file; a file over ``limit`` bytes or not text is a ``GitHubError``."""
        from urllib.parse import quote

        def fetch() -> Optional[str]:
            try:
                data = self._request("GET", f"{self._repo.url}/contents/{quote(path)}?ref={quote(ref)}")
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise
            if not isinstance(data, dict) or data.get("type") != "file" or data.get("encoding") != "base64":
                raise GitHubError(f"{path} at {ref[:7]}: not a file GitHub returns the content of")
            if int(data.get("size") or 0) > limit:
                raise GitHubError(f"{path} at {ref[:7]}: over {limit} bytes")
            try:
                return base64.b64decode(str(data.get("content") or ""))[: limit + 1].decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise GitHubError(f"{path} at {ref[:7]}: not UTF-8 text") from None

        return self._read(fetch)

    def list_files(self, number: int) -> list[FileInfo]:
        return self._read(lambda: [FileInfo(f.filename, f.status, f.patch) for f in self._pull(number).get_files()])

    # -- reviews --------------------------------------------------------------------------------

    def list_reviews(self, number: int) -> list[ReviewInfo]:
        def fetch() -> list[ReviewInfo]:
            out = []
            for r in self._pull(number).get_reviews():
                user = r._rawData.get("user") or {}  # as listed: no extra request per review
                out.append(ReviewInfo(r.id, r.state, r.body or "", r.commit_id, str(user.get("login") or ""),
                                      str(user.get("type") or ""), str(r._rawData.get("submitted_at") or "")))
            return out

        return self._read(fetch)

    def delete_pending_review(self, number: int, review_id: int) -> None:
        self._delete(f"{self._repo.url}/pulls/{number}/reviews/{review_id}")

    def create_review(
        self, number: int, commit_sha: str, body: str, comments: list[dict], recheck: Callable[[], Optional[int]]
    ) -> int:
        """A submitted ``COMMENT`` review pinned to ``commit_sha``; returns its id.

        ``recheck`` finds the review by its marker after a transient failure, so a review that
        GitHub created before failing to answer is not created twice.
        """
        payload = {"commit_id": commit_sha, "body": body, "event": "COMMENT", "comments": comments}
        return self._write(lambda: self._request("POST", f"{self._repo.url}/pulls/{number}/reviews", payload)["id"], recheck)

    def comment_is_accepted(self, number: int, commit_sha: str, body: str, comment: dict) -> bool:
        """Whether GitHub accepts one inline comment, tried in a pending review that is deleted.

        A refused review does not say which comment GitHub objected to; a pending review is
        visible to its author only, so trying each comment alone in one shows nobody anything.
        """
        payload = {"commit_id": commit_sha, "body": body, "comments": [comment]}  # no event: pending
        try:
            review_id = self._read(lambda: self._request("POST", f"{self._repo.url}/pulls/{number}/reviews", payload)["id"])
        except Unprocessable:
            return False
        self.delete_pending_review(number, review_id)
        return True

    def list_review_comments(self, number: int) -> list[ReviewCommentInfo]:
        def fetch() -> list[ReviewCommentInfo]:
            out = []
            for c in self._pull(number).get_review_comments():
                # The listed data, as received: asking PyGithub for an absent key (GitHub omits
                # in_reply_to_id on a thread's first comment) would fetch the comment again.
                raw = c._rawData
                out.append(
                    ReviewCommentInfo(c.id, c.body or "", c.path, raw.get("line"), raw.get("commit_id"), raw.get("in_reply_to_id"),
                                      raw.get("pull_request_review_id"), raw.get("start_line"), raw.get("side"),
                                      raw.get("start_side"))
                )
            return out

        return self._read(fetch)

    def delete_review_comment(self, comment_id: int) -> None:
        def delete() -> None:
            try:
                self._request("DELETE", f"{self._repo.url}/pulls/comments/{comment_id}")
            except GithubException as exc:
                if exc.status != 404:
                    raise

        self._write(delete)

    # -- issue comments -------------------------------------------------------------------------

    def list_issue_comments(self, number: int) -> list[IssueCommentInfo]:
        def fetch() -> list[IssueCommentInfo]:
            out = []
            for c in self._repo.get_issue(number).get_comments():
                user = c._rawData.get("user") or {}  # as listed; no extra request per comment
                out.append(IssueCommentInfo(c.id, c.body or "", str(user.get("login") or ""), str(user.get("type") or "")))
            return out

        return self._read(fetch)

    def create_issue_comment(self, number: int, body: str, recheck: Callable[[], Optional[int]]) -> int:
        return self._write(
            lambda: self._request("POST", f"{self._repo.url}/issues/{number}/comments", {"body": body})["id"], recheck
        )

    def get_issue_comment(self, comment_id: int) -> IssueCommentInfo:
        def fetch() -> IssueCommentInfo:
            data = self._request("GET", f"{self._repo.url}/issues/comments/{int(comment_id)}")
            user = data.get("user") or {}
            return IssueCommentInfo(int(data["id"]), str(data.get("body") or ""), str(user.get("login") or ""),
                                    str(user.get("type") or ""), str(data.get("created_at") or ""))

        return self._read(fetch)

    def collaborator_permission(self, login: str) -> str:
        """``login``'s permission on the repository as GitHub reports it (admin / write / read /
        none; maintain counts as write), or "none" for an unknown login."""
        from urllib.parse import quote

        def fetch() -> str:
            try:
                data = self._request("GET", f"{self._repo.url}/collaborators/{quote(login, safe='')}/permission")
            except GithubException as exc:
                if exc.status == 404:
                    return "none"
                raise
            return str(data.get("permission") or "none")

        return self._read(fetch)

    def add_reaction(self, comment_id: int, content: str) -> None:
        """React to an issue comment (adding one that exists is harmless, so it is retried)."""
        self._read(lambda: self._request("POST", f"{self._repo.url}/issues/comments/{int(comment_id)}/reactions",
                                         {"content": content}))

    def delete_issue_comment(self, comment_id: int) -> None:
        self._delete(f"{self._repo.url}/issues/comments/{comment_id}")

    def _delete(self, url: str) -> None:
        """DELETE ``url``; a 404 (already gone) is what was wanted."""

        def delete() -> None:
            try:
                self._request("DELETE", url)
            except GithubException as exc:
                if exc.status != 404:
                    raise

        self._write(delete)

    def claim(self, ref: str, sha: str) -> bool:
        """Create the git ref ``ref`` at ``sha``: a lock that GitHub itself holds, since creating
        a ref that exists is refused. True when this call created it, False when it existed.
        (A creation whose answer was lost reads as False: the caller waits, bounded, and goes on.)"""
        def create() -> bool:
            try:
                self._request("POST", f"{self._repo.url}/git/refs", {"ref": ref, "sha": sha})
                return True
            except GithubException as exc:
                if exc.status == 422 and "already exists" in _message(exc).lower():
                    return False
                raise

        return self._write(create)

    def edit_issue_comment(self, comment_id: int, body: str) -> None:
        self._write(lambda: self._request("PATCH", f"{self._repo.url}/issues/comments/{comment_id}", {"body": body}))

    # -- the gate -------------------------------------------------------------------------------

    def list_check_runs(self, sha: str, name: str) -> list[CheckRunInfo]:
        def fetch() -> list[CheckRunInfo]:
            runs = self._repo.get_commit(sha).get_check_runs(check_name=name)
            return [CheckRunInfo(r.id, r.name, r.external_id) for r in runs]

        return self._read(fetch)

    def create_check_run(self, payload: dict, recheck: Callable[[], Optional[int]]) -> int:
        return self._write(lambda: self._request("POST", f"{self._repo.url}/check-runs", payload)["id"], recheck)

    def annotations_count(self, check_id: int) -> int:
        data = self._read(lambda: self._request("GET", f"{self._repo.url}/check-runs/{check_id}"))
        return int((data.get("output") or {}).get("annotations_count") or 0)

    def add_annotations(self, check_id: int, payload: dict, expected_total: int) -> int:
        """One page of annotations. GitHub appends annotations on every update, so a page
        whose answer was lost is re-sent only if the count shows it did not arrive."""
        def send() -> int:
            data = self._request("PATCH", f"{self._repo.url}/check-runs/{check_id}", payload)
            return int((data.get("output") or {}).get("annotations_count") or expected_total)

        def recheck() -> Optional[int]:
            count = self.annotations_count(check_id)
            return count if count >= expected_total else None

        return self._write(send, recheck)

    def create_status(self, sha: str, state: str, context: str, description: str) -> None:
        payload = {"state": state, "context": context, "description": description[:140]}
        self._write(lambda: self._request("POST", f"{self._repo.url}/statuses/{sha}", payload))

    # -- the scan's fix pull request (graphmend scan): Git Data API, pulls from a branch ----------
    # One commit made from blobs -> tree -> commit, then the branch ref created or force-moved.
    # Blobs, trees and commits are content-addressed (re-sending one after a lost answer makes
    # the same object, or a harmless twin), so they are simply retried; ref and pull creation
    # look before writing again.

    def branch_sha(self, branch: str) -> Optional[str]:
        """The commit a branch points at, or None when there is no such branch."""
        def fetch() -> Optional[str]:
            try:
                return self._request("GET", f"{self._repo.url}/git/ref/heads/{branch}")["object"]["sha"]
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise

        return self._read(fetch)

    def git_commit(self, sha: str) -> tuple[str, tuple[str, ...]]:
        """(tree, parents) of a commit."""
        data = self._read(lambda: self._request("GET", f"{self._repo.url}/git/commits/{sha}"))
        return data["tree"]["sha"], tuple(p["sha"] for p in data.get("parents") or [])

    def tree_modes(self, tree_sha: str) -> dict[str, str]:
        """path -> mode of every blob in a tree (so that a rewrite keeps an executable bit)."""
        data = self._read(lambda: self._request("GET", f"{self._repo.url}/git/trees/{tree_sha}?recursive=1"))
        return {e["path"]: e["mode"] for e in data.get("tree") or [] if e.get("type") == "blob"}

    def create_blob(self, content: bytes) -> str:
        payload = {"content": base64.b64encode(content).decode("ascii"), "encoding": "base64"}
        return self._write(lambda: self._request("POST", f"{self._repo.url}/git/blobs", payload)["sha"])

    def create_tree(self, base_tree: str, entries: list[dict]) -> str:
        payload = {"base_tree": base_tree, "tree": entries}
        return self._write(lambda: self._request("POST", f"{self._repo.url}/git/trees", payload)["sha"])

    def create_commit(self, message: str, tree: str, parents: list[str]) -> str:
        payload = {"message": message, "tree": tree, "parents": parents}
        return self._write(lambda: self._request("POST", f"{self._repo.url}/git/commits", payload)["sha"])

    def create_branch(self, branch: str, sha: str) -> None:
        payload = {"ref": f"refs/heads/{branch}", "sha": sha}
        self._write(lambda: self._request("POST", f"{self._repo.url}/git/refs", payload),
                    lambda: True if self.branch_sha(branch) == sha else None)

    def fast_forward_branch(self, branch: str, sha: str) -> None:
        """Move ``branch`` to ``sha`` only as a fast-forward (``force: false``): a push that
        landed meanwhile makes GitHub refuse (422, ``Unprocessable``) instead of being lost."""
        from urllib.parse import quote

        payload = {"sha": sha, "force": False}
        self._write(lambda: self._request("PATCH", f"{self._repo.url}/git/refs/heads/{quote(branch)}", payload),
                    lambda: True if self.branch_sha(branch) == sha else None)

    def force_update_branch(self, branch: str, sha: str) -> None:
        payload = {"sha": sha, "force": True}
        self._write(lambda: self._request("PATCH", f"{self._repo.url}/git/refs/heads/{branch}", payload))

    def find_pulls_from_branch(self, branch: str, state: str = "open") -> list[PullInfo]:
        """Pull requests whose head is ``branch`` of this repository (not a fork's namesake)."""
        owner = self.repository.split("/")[0]

        def fetch() -> list[PullInfo]:
            out = []
            for pull in self._repo.get_pulls(state=state, head=f"{owner}:{branch}"):
                raw = pull._rawData
                head, base = raw["head"], raw["base"]
                if head.get("ref") != branch or ((head.get("repo") or {}).get("full_name")) != self.repository:
                    continue
                out.append(PullInfo(raw["number"], head["sha"], base["sha"], self.repository,
                                    ((base.get("repo") or {}).get("full_name")) or "", raw["state"]))
            return sorted(out, key=lambda p: p.number)

        return self._read(fetch)

    def create_pull(self, title: str, branch: str, base: str, body: str) -> int:
        payload = {"title": title, "head": branch, "base": base, "body": body, "maintainer_can_modify": True}

        def recheck() -> Optional[int]:
            found = self.find_pulls_from_branch(branch)
            return found[0].number if found else None

        return self._write(lambda: self._request("POST", f"{self._repo.url}/pulls", payload)["number"], recheck)

    def update_pull(self, number: int, *, title: Optional[str] = None, body: Optional[str] = None,
                    state: Optional[str] = None) -> None:
        payload = {k: v for k, v in (("title", title), ("body", body), ("state", state)) if v is not None}
        self._write(lambda: self._request("PATCH", f"{self._repo.url}/pulls/{number}", payload))


def installation_token(
    app_id: str,
    private_key_pem: str,
    *,
    installation_id: Optional[int] = None,
    repository: Optional[str] = None,
    base_url: Optional[str] = None,
    policy: retry.Policy = retry.Policy(),
    sleep: Optional[Callable[[float], None]] = None,
) -> str:
    """A GitHub App installation token: a JWT signed RS256 with the app's private key (PyGithub's
    ``Auth.AppAuth``) exchanged at ``POST /app/installations/{id}/access_tokens``. Without an
    installation id, the app's installation on ``repository`` is looked up first.

    A token minted for an installation makes the bot act as the app: unlike the workflow's
    ``GITHUB_TOKEN``, pull requests it opens trigger workflows (CI runs on the scan's fixes).
    """
    from github import GithubIntegration

    integration = GithubIntegration(
        auth=Auth.AppAuth(app_id, private_key_pem),
        base_url=(base_url or api_url_from_env()).rstrip("/"),
        retry=None,  # our policy, as for the client
        seconds_between_requests=None,
        seconds_between_writes=None,
        timeout=30,
    )
    wait = sleep or __import__("time").sleep

    def exchange() -> str:
        number = installation_id
        if number is None:
            if not repository or "/" not in repository:
                raise GitHubError("an installation id or an owner/name repository is needed")
            owner, name = repository.split("/", 1)
            number = integration.get_repo_installation(owner, name).id
        return integration.get_access_token(int(number)).token

    # Minting a token twice is harmless (each is valid on its own): retried like a read.
    return retry.read(lambda: _call(exchange), policy, wait)
