"""A local GitHub REST API server for the bot's tests: real HTTP, real state, GitHub's rules.

It serves the operations a review bot uses (pulls, files, reviews, review comments, issue
comments, check runs, statuses) for repositories backed by real git repositories in temp
dirs: a pull request's files and their ``patch`` texts come from ``git diff base...head``.
Every request and every response is validated against GitHub's OpenAPI description
(``spec.py``); a request that breaks it gets a 422 and is recorded in ``violations``, a
response that breaks it is recorded too (a bug in this server), and the tests assert that
``violations`` stays empty.

It refuses what GitHub refuses: a review comment on a line outside the diff, a multi-line
comment with ``start_line >= line`` or spanning two hunks, a second pending review of the
same user, a body longer than 65,536 characters, any write with a read-only token. Faults
can be injected per operation: a 502 (optionally after doing the work, as a proxy timing
out would), a secondary rate limit (403 with ``retry-after``), or refusing a comment.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

from tests.github_server import apply_ops, git_data, spec

MAX_BODY = 65536
DOCS = "https://docs.github.com/rest"


class HttpError(Exception):
    def __init__(self, status: int, message: str, errors: Optional[list[str]] = None, headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.errors, self.headers = status, message, errors, headers or {}

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message": self.message, "documentation_url": DOCS}
        if self.errors is not None:
            data["errors"] = self.errors
        elif self.status != 422:
            data["status"] = str(self.status)
        return data


@dataclass
class User:
    login: str
    id: int
    can_write: bool = True
    can_write_checks: bool = True


@dataclass
class Pull:
    number: int
    repo: str
    git_dir: str
    base_sha: str
    head_sha: str
    head_repo: str
    base_ref: str = "main"
    head_ref: str = "feature"
    state: str = "open"
    maintainer_can_modify: bool = False


@dataclass
class Review:
    id: int
    pull: int
    user: User
    state: str
    body: str
    commit_id: str


@dataclass
class ReviewComment:
    id: int
    pull: int
    review_id: int
    user: User
    path: str
    line: Optional[int]
    start_line: Optional[int]
    original_line: int
    body: str
    commit_id: str
    original_commit_id: str
    diff_hunk: str
    in_reply_to_id: Optional[int] = None


@dataclass
class IssueComment:
    id: int
    issue: int
    user: User
    body: str


@dataclass
class CheckRun:
    id: int
    head_sha: str
    name: str
    status: str
    conclusion: Optional[str]
    external_id: str
    title: str = ""
    summary: str = ""
    annotations: list[dict] = field(default_factory=list)


@dataclass
class Status:
    id: int
    sha: str
    state: str
    context: str
    description: str


@dataclass
class Fault:
    op: str
    kind: str  # "502" | "secondary" | "primary" | "reject-comment"
    after: bool = False  # do the work, then answer the error
    times: int = 1
    match: str = ""  # reject-comment: "path:line"
    reset_at: float = 0.0  # primary: the limit is spent until then (epoch seconds), for every call


def git(cwd: str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def file_patches(git_dir: str, base: str, head: str) -> list[dict[str, Any]]:
    """What GitHub's "list pull request files" returns: one entry per file, ``patch`` = hunks."""
    out = []
    rows = git(git_dir, "diff", "--name-status", "--no-renames", f"{base}...{head}").splitlines()
    for row in rows:
        status_letter, path = row.split("\t", 1)
        status = {"A": "added", "D": "removed", "M": "modified"}.get(status_letter[0], "changed")
        text = git(git_dir, "diff", "--no-renames", f"{base}...{head}", "--", path)
        numstat = git(git_dir, "diff", "--numstat", "--no-renames", f"{base}...{head}", "--", path).split()
        binary = numstat[0] == "-"
        patch = None
        if not binary and "@@" in text:
            patch = text[text.index("\n@@") + 1 :] if not text.startswith("@@") else text
            patch = patch.rstrip("\n")
        adds = 0 if binary else int(numstat[0])
        dels = 0 if binary else int(numstat[1])
        out.append({"filename": path, "status": status, "patch": patch, "additions": adds, "deletions": dels})
    return out


def commentable(patch: Optional[str]) -> list[tuple[set[int], str]]:
    """Per hunk: the RIGHT-side line numbers a comment may sit on, and the hunk's text."""
    if not patch:
        return []
    hunks: list[tuple[set[int], str]] = []
    current: Optional[set[int]] = None
    text: list[str] = []
    line = 0
    for raw in patch.split("\n"):
        m = re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", raw)
        if m:
            if current is not None:
                hunks.append((current, "\n".join(text)))
            current, text, line = set(), [raw], int(m.group(1))
            continue
        if current is None:
            continue
        text.append(raw)
        if raw.startswith("-") or raw.startswith("\\"):
            continue
        current.add(line)
        line += 1
    if current is not None:
        hunks.append((current, "\n".join(text)))
    return hunks


class GitHubState:
    """Everything the server knows, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users: dict[str, User] = {}
        self.repos: dict[str, dict[str, Any]] = {}
        self.pulls: dict[tuple[str, int], Pull] = {}
        self.reviews: list[Review] = []
        self.review_comments: list[ReviewComment] = []
        self.issue_comments: list[IssueComment] = []
        self.check_runs: list[CheckRun] = []
        self.statuses: list[Status] = []
        self.faults: list[Fault] = []
        self.violations: list[str] = []
        self.log: list[tuple[str, str, int]] = []  # (method, path, status)
        self._next = 1000

    def next_id(self) -> int:
        with self.lock:
            self._next += 1
            return self._next


class GitHubServer:
    """``with GitHubServer() as gh: ...``: a running server; ``gh.url`` is PyGithub's base_url."""

    def __init__(self) -> None:
        self.state = GitHubState()
        spec.openapi()  # load once, before the first request arrives on a handler thread
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "GitHubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    # -- set-up helpers for tests ---------------------------------------------------------------

    def add_user(self, token: str, login: str, *, can_write: bool = True, can_write_checks: bool = True) -> User:
        user = User(login, self.state.next_id(), can_write, can_write_checks)
        self.state.users[token] = user
        return user

    def add_repo(self, full_name: str, git_dir: str) -> None:
        self.state.repos[full_name] = {"id": self.state.next_id(), "git_dir": git_dir}

    def open_pull(self, repo: str, base_sha: str, head_sha: str, *, head_repo: Optional[str] = None,
                  maintainer_can_modify: bool = False) -> Pull:
        number = 1 + sum(1 for (r, _n) in self.state.pulls if r == repo)
        git_dir = self.state.repos[repo]["git_dir"]
        pull = Pull(number, repo, git_dir, base_sha, head_sha, head_repo or repo,
                    maintainer_can_modify=maintainer_can_modify)
        self.state.pulls[(repo, number)] = pull
        return pull

    def push(self, repo: str, number: int, new_head: str) -> None:
        """A new head commit: comments whose lines changed or left the diff become outdated."""
        with self.state.lock:
            pull = self.state.pulls[(repo, number)]
            old_head = pull.head_sha
            pull.head_sha = new_head
            files = {f["filename"]: f for f in file_patches(pull.git_dir, pull.base_sha, new_head)}
            for c in self.state.review_comments:
                if c.pull != number or c.line is None:
                    continue
                f = files.get(c.path)
                lines = {n for hunk, _ in commentable(f and f["patch"]) for n in hunk}
                first = c.start_line or c.line
                same = _lines(pull.git_dir, old_head, c.path, first, c.line) == _lines(pull.git_dir, new_head, c.path, first, c.line)
                if not same or c.line not in lines:
                    c.line = None
                    c.start_line = None
                else:
                    c.commit_id = new_head

    def inject(self, op: str, kind: str, *, after: bool = False, times: int = 1, match: str = "",
               reset_in: float = 0.0) -> None:
        """``kind="primary"``: the primary rate limit is spent for ``reset_in`` seconds; every call
        of ``op`` until then is refused as GitHub refuses it (403, ``x-ratelimit-remaining: 0``,
        ``x-ratelimit-reset``), however often it is retried."""
        import time

        self.state.faults.append(Fault(op, kind, after, times, match, time.time() + reset_in if kind == "primary" else 0.0))

    # -- inspection helpers ---------------------------------------------------------------------

    def reviews_of(self, number: int) -> list[Review]:
        return [r for r in self.state.reviews if r.pull == number]

    def comments_of(self, number: int) -> list[ReviewComment]:
        return [c for c in self.state.review_comments if c.pull == number]

    def issue_comments_of(self, number: int) -> list[IssueComment]:
        return [c for c in self.state.issue_comments if c.issue == number]

    def requests(self, method: str = "", path_re: str = "") -> list[tuple[str, str, int]]:
        return [r for r in self.state.log if (not method or r[0] == method) and re.search(path_re, r[1])]


def _lines(git_dir: str, sha: str, path: str, first: int, last: int) -> Optional[list[str]]:
    try:
        text = git(git_dir, "show", f"{sha}:{path}")
    except subprocess.CalledProcessError:
        return None
    return text.splitlines()[first - 1 : last]


# ---------------------------------------------------------------------------------------------
# Response objects, built from GitHub's own examples with our state filled in


def _user(u: User) -> dict[str, Any]:
    d = spec.example("issue-comment")["user"]
    d.update(login=u.login, id=u.id, type="Bot" if u.login.endswith("[bot]") else "User")
    return d


_BASE = threading.local()  # the URL the client used, so links in answers lead back here


def _api(path: str) -> str:
    return f"{getattr(_BASE, 'url', spec.FAKE_HOST)}{path}"


def pull_json(p: Pull) -> dict[str, Any]:
    d = spec.example("pull-request")
    d.update(number=p.number, state=p.state, id=p.number + 500, url=_api(f"/repos/{p.repo}/pulls/{p.number}"))
    d["head"]["sha"], d["base"]["sha"] = p.head_sha, p.base_sha
    d["head"]["ref"], d["base"]["ref"] = p.head_ref, p.base_ref
    d["head"]["repo"]["full_name"] = p.head_repo
    d["base"]["repo"]["full_name"] = p.repo
    d["requested_teams"] = []  # GitHub's example team lacks a required field
    d["maintainer_can_modify"] = p.maintainer_can_modify
    return d


def pull_simple_json(p: Pull) -> dict[str, Any]:
    d = spec.example("pull-request-simple-items")[0]
    d.update(number=p.number, state=p.state, id=p.number + 500, url=_api(f"/repos/{p.repo}/pulls/{p.number}"))
    d["head"]["sha"], d["base"]["sha"] = p.head_sha, p.base_sha
    d["head"]["ref"], d["base"]["ref"] = p.head_ref, p.base_ref
    d["head"]["repo"]["full_name"] = p.head_repo
    d["base"]["repo"]["full_name"] = p.repo
    d["requested_teams"] = []
    return d


def stamp(object_id: int) -> str:
    """When the object with ``object_id`` was made: ids are handed out in order, one second
    apart, so what was made later has a later time (as GitHub's ``created_at``/``submitted_at``)."""
    return (datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
            + datetime.timedelta(seconds=object_id)).strftime("%Y-%m-%dT%H:%M:%SZ")


def review_json(r: Review, repo: str) -> dict[str, Any]:
    d = spec.example("pull-request-review")
    d.update(id=r.id, state=r.state, body=r.body, commit_id=r.commit_id, user=_user(r.user), submitted_at=stamp(r.id))
    d["pull_request_url"] = _api(f"/repos/{repo}/pulls/{r.pull}")
    if r.state == "PENDING":
        d.pop("submitted_at", None)
    return d


def review_comment_json(c: ReviewComment, repo: str) -> dict[str, Any]:
    d = spec.example("pull-request-review-comment-items")[0]
    d.update(
        id=c.id, pull_request_review_id=c.review_id, user=_user(c.user), path=c.path, body=c.body,
        line=c.line, start_line=c.start_line, original_line=c.original_line,
        original_start_line=None, commit_id=c.commit_id, original_commit_id=c.original_commit_id,
        diff_hunk=c.diff_hunk, side="RIGHT", start_side="RIGHT" if c.start_line else None,
        position=None if c.line is None else 1, url=_api(f"/repos/{repo}/pulls/comments/{c.id}"),
    )
    if c.start_line is None:
        d.pop("start_side", None)
    if c.line is None:
        # Outdated: GitHub sends null, but its description says integer; omit them instead
        # (absent reads the same as null to a client).
        for key in ("line", "position", "start_line"):
            d.pop(key, None)
    if c.in_reply_to_id is None:
        d.pop("in_reply_to_id", None)
    else:
        d["in_reply_to_id"] = c.in_reply_to_id
    return d


def issue_comment_json(c: IssueComment, repo: str) -> dict[str, Any]:
    d = spec.example("issue-comment")
    d.update(id=c.id, body=c.body, user=_user(c.user), url=_api(f"/repos/{repo}/issues/comments/{c.id}"),
             created_at=stamp(c.id), updated_at=stamp(c.id))
    d["issue_url"] = _api(f"/repos/{repo}/issues/{c.issue}")
    return d


def check_run_json(c: CheckRun, repo: str) -> dict[str, Any]:
    d = spec.example("check-run-example-of-completed-conclusion")
    d.update(id=c.id, head_sha=c.head_sha, name=c.name, status=c.status, conclusion=c.conclusion, external_id=c.external_id)
    d["url"] = _api(f"/repos/{repo}/check-runs/{c.id}")
    d["output"].update(title=c.title, summary=c.summary, annotations_count=len(c.annotations))
    return d


def status_json(s: Status, user: User, repo: str) -> dict[str, Any]:
    d = spec.example("status")
    d.update(id=s.id, state=s.state, context=s.context, description=s.description, creator=_user(user))
    d["url"] = _api(f"/repos/{repo}/statuses/{s.sha}")
    return d


# ---------------------------------------------------------------------------------------------
# The handler


Route = tuple[str, re.Pattern[str], str, str]  # method, path regex, operation name, handler method
ROUTES: list[Route] = [
    (m, re.compile("^" + p + "$"), op, fn)
    for m, p, op, fn in [
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)", "repos/get", "get_repo"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls", "pulls/list", "list_pulls"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)", "pulls/get", "get_pull"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)/files", "pulls/list-files", "list_files"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)/reviews", "pulls/list-reviews", "list_reviews"),
        ("POST", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)/reviews", "pulls/create-review", "create_review"),
        ("DELETE", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)/reviews/(?P<id>\d+)", "pulls/delete-pending-review", "delete_review"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<n>\d+)/comments", "pulls/list-review-comments", "list_review_comments"),
        ("DELETE", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/comments/(?P<id>\d+)", "pulls/delete-review-comment", "delete_review_comment"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<n>\d+)/comments", "issues/list-comments", "list_issue_comments"),
        ("POST", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<n>\d+)/comments", "issues/create-comment", "create_issue_comment"),
        ("PATCH", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/comments/(?P<id>\d+)", "issues/update-comment", "update_issue_comment"),
        ("DELETE", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/comments/(?P<id>\d+)", "issues/delete-comment", "delete_issue_comment"),
        ("POST", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs", "checks/create", "create_check_run"),
        ("PATCH", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs/(?P<id>\d+)", "checks/update", "update_check_run"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/commits/(?P<ref>[^/]+)/check-runs", "checks/list-for-ref", "list_check_runs"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs/(?P<id>\d+)", "checks/get", "get_check_run"),
        ("POST", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/statuses/(?P<sha>[0-9a-f]{40})", "repos/create-commit-status", "create_status"),
        ("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/contents/(?P<path>.+)", "repos/get-content", "get_content"),
    ]
]
# The scan's fix pull request (Git Data API, pulls from a branch) and GitHub App auth.
ROUTES += [(m, re.compile("^" + p + "$"), op, fn) for m, p, op, fn in git_data.SPECS]
# `graphmend apply`: who may ask (collaborator permission), the comment, a reaction to it.
ROUTES += [(m, re.compile("^" + p + "$"), op, fn) for m, p, op, fn in apply_ops.SPECS]


_CONTENTS_PATH = re.compile(r"^(/repos/[^/]+/[^/]+/contents/)(.+)$")


def _validation_path(path: str) -> str:
    """As ``git_data.validation_path``, and a file path in ``/contents/`` (several segments on
    GitHub, ``x-multi-segment`` in the description) as one encoded segment."""
    m = _CONTENTS_PATH.match(path)
    return m.group(1) + m.group(2).replace("/", "%2F") if m else git_data.validation_path(path)


class _Handler(git_data.GitDataOps, apply_ops.ApplyOps, BaseHTTPRequestHandler):
    state: GitHubState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    # -- plumbing -------------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()}
        _BASE.url = f"http://{self.headers.get('Host')}"
        sreq = spec.SpecRequest(method, _validation_path(path), query, headers, raw)
        status, payload, extra = self._dispatch(method, path, query, raw, sreq)
        data = b"" if payload is None else json.dumps(payload).encode()
        out_headers = {"Content-Type": "application/json; charset=utf-8", **extra}
        if status not in (204, 304):
            problem = spec.response_errors(sreq, spec.SpecResponse(status, data or None, out_headers))
            if problem:
                self.state.violations.append(f"response {method} {path} {status}: {problem}")
        with self.state.lock:
            self.state.log.append((method, path, status))
        self.send_response(status)
        for k, v in out_headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _dispatch(self, method: str, path: str, query: dict, raw: bytes, sreq: spec.SpecRequest) -> tuple[int, Any, dict]:
        route = next(((op, fn, m.groupdict()) for mm, rx, op, fn in ROUTES if mm == method for m in [rx.match(path)] if m), None)
        if route is None:
            self.state.violations.append(f"request {method} {path}: no such operation in this server")
            return 404, {"message": "Not Found", "documentation_url": DOCS}, {}
        op, fn, params = route
        problem = spec.request_errors(sreq)
        if problem:
            self.state.violations.append(f"request {method} {path}: {problem}")
            return 422, {"message": "Invalid request.", "documentation_url": DOCS, "errors": [problem[:500]]}, {}
        if op in git_data.JWT_OPS:  # authenticated as the GitHub App (a JWT), not with a token
            return self.app_dispatch(op, fn, params, query, raw)
        user = self._auth()
        if user is None:
            return 401, {"message": "Bad credentials", "documentation_url": DOCS}, {}
        repo = f"{params['owner']}/{params['repo']}"
        if repo not in self.state.repos:
            return 404, {"message": "Not Found", "documentation_url": DOCS}, {}
        body = json.loads(raw) if raw else {}
        fault = self._fault(op, body)
        if fault is not None and not fault.after:
            return self._fault_answer(fault)
        try:
            with self.state.lock:
                if method != "GET" and not user.can_write:
                    raise HttpError(403, "Resource not accessible by integration")
                status, payload, extra = getattr(self, "op_" + fn)(repo, params, query, body, user)
        except HttpError as err:
            return err.status, err.payload(), err.headers
        if fault is not None:
            return self._fault_answer(fault)
        return status, payload, extra

    def _auth(self) -> Optional[User]:
        value = self.headers.get("Authorization", "")
        token = value.split(" ", 1)[1] if " " in value else ""
        return self.state.users.get(token)

    def _fault(self, op: str, body: dict) -> Optional[Fault]:
        with self.state.lock:
            for f in self.state.faults:
                if f.op == op and f.times > 0:
                    if f.kind == "reject-comment":
                        continue
                    if f.kind == "primary":
                        if time.time() < f.reset_at:
                            return f
                        continue
                    f.times -= 1
                    return f
        return None

    def _fault_answer(self, fault: Fault) -> tuple[int, Any, dict]:
        if fault.kind == "primary":
            return 403, {"message": "API rate limit exceeded for installation ID 1.", "documentation_url": DOCS}, {
                "x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-used": "5000",
                "x-ratelimit-reset": str(int(fault.reset_at) + 1), "x-ratelimit-resource": "core"}
        if fault.kind == "secondary":
            return 403, {
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": DOCS,
            }, {"retry-after": "1"}
        return 502, {"message": "Server Error", "documentation_url": DOCS}, {}

    def _pull(self, repo: str, params: dict) -> Pull:
        pull = self.state.pulls.get((repo, int(params["n"])))
        if pull is None:
            raise HttpError(404, "Not Found")
        return pull

    def _page(self, items: list, query: dict, path: str) -> tuple[int, Any, dict]:
        per_page = min(100, int((query.get("per_page") or ["30"])[0]))
        page = max(1, int((query.get("page") or ["1"])[0]))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []
        last = max(1, -(-len(items) // per_page))
        base = f"http://{self.headers.get('Host')}{path}"
        extra = "".join(f"&{k}={v[0]}" for k, v in sorted(query.items()) if k not in ("page", "per_page"))
        if page < last:
            links.append(f'<{base}?per_page={per_page}&page={page + 1}{extra}>; rel="next"')
            links.append(f'<{base}?per_page={per_page}&page={last}{extra}>; rel="last"')
        return 200, chunk, ({"Link": ", ".join(links)} if links else {})

    # -- operations -----------------------------------------------------------------------------

    def op_get_repo(self, repo, params, query, body, user):
        d = spec.example("full-repository-default-response")
        d.update(full_name=repo, name=params["repo"], id=self.state.repos[repo]["id"], url=_api(f"/repos/{repo}"))
        return 200, d, {}

    def op_list_pulls(self, repo, params, query, body, user):
        state = (query.get("state") or ["open"])[0]
        pulls = [p for (r, _), p in sorted(self.state.pulls.items()) if r == repo and (state == "all" or p.state == state)]
        head = (query.get("head") or [""])[0]  # "owner:branch", as GitHub filters
        if head:
            pulls = [p for p in pulls if f"{p.head_repo.split('/')[0]}:{p.head_ref}" == head]
        status, page, extra = self._page(pulls, query, f"/repos/{repo}/pulls")
        return status, [pull_simple_json(p) for p in page], extra

    def op_get_pull(self, repo, params, query, body, user):
        return 200, pull_json(self._pull(repo, params)), {}

    def op_list_files(self, repo, params, query, body, user):
        pull = self._pull(repo, params)
        files = file_patches(pull.git_dir, pull.base_sha, pull.head_sha)
        status, page, extra = self._page(files, query, f"/repos/{repo}/pulls/{pull.number}/files")
        out = []
        for f in page:
            d = spec.example("diff-entry-items")[0]
            d.update(filename=f["filename"], status=f["status"], additions=f["additions"], deletions=f["deletions"],
                     changes=f["additions"] + f["deletions"])
            if f["patch"] is None:
                d.pop("patch", None)
            else:
                d["patch"] = f["patch"]
            out.append(d)
        return status, out, extra

    def op_get_content(self, repo, params, query, body, user):
        """A file of the repository's git directory at ``ref`` (default: HEAD), as GitHub returns
        one: base64 content in 60-character lines; 404 for a path that is not a file there."""
        git_dir = self.state.repos[repo]["git_dir"]
        ref = (query.get("ref") or ["HEAD"])[0]
        path = params["path"]
        kind = subprocess.run(["git", "cat-file", "-t", f"{ref}:{path}"], cwd=git_dir, capture_output=True, text=True)
        if kind.returncode != 0 or kind.stdout.strip() != "blob":
            raise HttpError(404, "Not Found")
        data = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=git_dir, capture_output=True, check=True).stdout
        sha = git(git_dir, "rev-parse", f"{ref}:{path}").strip()
        encoded = base64.b64encode(data).decode()
        d = spec.example("content-file-response-if-content-is-a-file")
        d.update(name=path.rsplit("/", 1)[-1], path=path, sha=sha, size=len(data), type="file", encoding="base64",
                 content="".join(encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60)),
                 url=_api(f"/repos/{repo}/contents/{path}?ref={ref}"))
        return 200, d, {}

    def op_list_reviews(self, repo, params, query, body, user):
        pull = self._pull(repo, params)
        # A pending review is visible to its author only.
        reviews = [r for r in self.state.reviews if r.pull == pull.number and (r.state != "PENDING" or r.user is user)]
        status, page, extra = self._page(reviews, query, f"/repos/{repo}/pulls/{pull.number}/reviews")
        return status, [review_json(r, repo) for r in page], extra

    def op_create_review(self, repo, params, query, body, user):
        pull = self._pull(repo, params)
        text = body.get("body") or ""
        if len(text) > MAX_BODY:
            raise HttpError(422, "Unprocessable Entity", [f"Body is too long (maximum is {MAX_BODY} characters)"])
        if any(r.pull == pull.number and r.user is user and r.state == "PENDING" for r in self.state.reviews):
            raise HttpError(422, "Unprocessable Entity", ["User can only have one pending review per pull request"])
        commit = body.get("commit_id") or pull.head_sha
        if commit != pull.head_sha:
            # GitHub accepts older commits of the PR too; the bot pins the head it analysed.
            known = git(pull.git_dir, "rev-list", f"{pull.base_sha}..{pull.head_sha}").split()
            if commit not in known:
                raise HttpError(422, "Unprocessable Entity", ["commit_id is not part of the pull request"])
        files = {f["filename"]: f for f in file_patches(pull.git_dir, pull.base_sha, commit)}
        event = body.get("event")
        if event == "REQUEST_CHANGES" and not text:
            raise HttpError(422, "Unprocessable Entity", ["Body is required for REQUEST_CHANGES"])
        review = Review(self.state.next_id(), pull.number, user, {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}.get(event or "", "PENDING"), text, commit)
        comments = []
        for c in body.get("comments") or []:
            comments.append(self._check_comment(c, files, repo, pull, review, commit))
        self.state.reviews.append(review)
        self.state.review_comments.extend(comments)
        return 200, review_json(review, repo), {}

    def _check_comment(self, c: dict, files: dict, repo: str, pull: Pull, review: Review, commit: str) -> ReviewComment:
        path, line, start = c.get("path"), c.get("line"), c.get("start_line")
        cbody = c.get("body") or ""
        if len(cbody) > MAX_BODY:
            raise HttpError(422, "Unprocessable Entity", [f"Body is too long (maximum is {MAX_BODY} characters)"])
        if line is None:
            raise HttpError(422, "Unprocessable Entity", ["Position or line is required for a review comment"])
        if c.get("side", "RIGHT") != "RIGHT":
            raise HttpError(422, "Unprocessable Entity", ["Only RIGHT-side comments are supported by this server"])
        for f in self.state.faults:
            if f.kind == "reject-comment" and f.times > 0 and f.match == f"{path}:{line}":
                f.times -= 1
                raise HttpError(422, "Unprocessable Entity", ["Pull request review thread line must be part of the diff"])
        if start is not None and start >= line:
            raise HttpError(422, "Unprocessable Entity", ["Pull request review thread start line must precede the end line"])
        f = files.get(path)
        hunks = commentable(f["patch"] if f else None)
        hunk = next(((lines, text) for lines, text in hunks if line in lines), None)
        if hunk is None:
            raise HttpError(422, "Unprocessable Entity", ["Pull request review thread line must be part of the diff"])
        if start is not None and not all(n in hunk[0] for n in range(start, line + 1)):
            raise HttpError(422, "Unprocessable Entity", ["Pull request review thread start line must be in the same hunk"])
        return ReviewComment(self.state.next_id(), pull.number, review.id, review.user, path, line, start, line,
                             cbody, commit, commit, hunk[1])

    def op_delete_review(self, repo, params, query, body, user):
        pull = self._pull(repo, params)
        review = next((r for r in self.state.reviews if r.id == int(params["id"]) and r.pull == pull.number), None)
        if review is None or (review.state == "PENDING" and review.user is not user):
            raise HttpError(404, "Not Found")
        if review.state != "PENDING":
            raise HttpError(422, "Unprocessable Entity", ["Can not delete a non-pending pull request review"])
        self.state.reviews.remove(review)
        self.state.review_comments = [c for c in self.state.review_comments if c.review_id != review.id]
        return 200, review_json(review, repo), {}

    def op_list_review_comments(self, repo, params, query, body, user):
        pull = self._pull(repo, params)
        pending = {r.id for r in self.state.reviews if r.state == "PENDING"}
        comments = [c for c in self.state.review_comments if c.pull == pull.number and c.review_id not in pending]
        status, page, extra = self._page(comments, query, f"/repos/{repo}/pulls/{pull.number}/comments")
        return status, [review_comment_json(c, repo) for c in page], extra

    def op_delete_review_comment(self, repo, params, query, body, user):
        c = next((c for c in self.state.review_comments if c.id == int(params["id"])), None)
        if c is None:
            raise HttpError(404, "Not Found")
        if c.user is not user:
            raise HttpError(403, "Must have admin rights to Repository.")
        self.state.review_comments.remove(c)
        return 204, None, {}

    def op_list_issue_comments(self, repo, params, query, body, user):
        n = int(params["n"])
        comments = [c for c in self.state.issue_comments if c.issue == n]
        status, page, extra = self._page(comments, query, f"/repos/{repo}/issues/{n}/comments")
        return status, [issue_comment_json(c, repo) for c in page], extra

    def op_create_issue_comment(self, repo, params, query, body, user):
        text = body.get("body") or ""
        if len(text) > MAX_BODY:
            raise HttpError(422, "Validation Failed", [f"Body is too long (maximum is {MAX_BODY} characters)"])
        c = IssueComment(self.state.next_id(), int(params["n"]), user, text)
        self.state.issue_comments.append(c)
        return 201, issue_comment_json(c, repo), {}

    def op_delete_issue_comment(self, repo, params, query, body, user):
        comment = next((c for c in self.state.issue_comments if c.id == int(params["id"])), None)
        if comment is None:
            raise HttpError(404, "Not Found")
        if comment.user is not user:
            raise HttpError(403, "Must have admin rights to Repository.")
        self.state.issue_comments.remove(comment)
        return 204, None, {}

    def op_update_issue_comment(self, repo, params, query, body, user):
        c = next((c for c in self.state.issue_comments if c.id == int(params["id"])), None)
        if c is None:
            raise HttpError(404, "Not Found")
        if c.user is not user:
            raise HttpError(403, "Must have admin rights to Repository.")
        if len(body.get("body") or "") > MAX_BODY:
            raise HttpError(422, "Validation Failed", [f"Body is too long (maximum is {MAX_BODY} characters)"])
        c.body = body["body"]
        return 200, issue_comment_json(c, repo), {}

    def _annotations(self, output: Optional[dict]) -> list[dict]:
        anns = list((output or {}).get("annotations") or [])
        if len(anns) > 50:
            raise HttpError(422, "Unprocessable Entity", ["Only 50 annotations are allowed per request"])
        return anns

    def op_create_check_run(self, repo, params, query, body, user):
        if not user.can_write_checks:
            raise HttpError(403, "Resource not accessible by personal access token")
        output = body.get("output")
        run = CheckRun(self.state.next_id(), body["head_sha"], body["name"], body.get("status", "queued"),
                       body.get("conclusion"), body.get("external_id", ""), (output or {}).get("title", ""),
                       (output or {}).get("summary", ""), self._annotations(output))
        if run.conclusion:
            run.status = "completed"
        self.state.check_runs.append(run)
        return 201, check_run_json(run, repo), {}

    def op_update_check_run(self, repo, params, query, body, user):
        if not user.can_write_checks:
            raise HttpError(403, "Resource not accessible by personal access token")
        run = next((r for r in self.state.check_runs if r.id == int(params["id"])), None)
        if run is None:
            raise HttpError(404, "Not Found")
        output = body.get("output")
        if output:
            run.title, run.summary = output.get("title", run.title), output.get("summary", run.summary)
            run.annotations.extend(self._annotations(output))  # GitHub appends annotations on update
        if body.get("conclusion"):
            run.conclusion, run.status = body["conclusion"], "completed"
        return 200, check_run_json(run, repo), {}

    def op_get_check_run(self, repo, params, query, body, user):
        run = next((r for r in self.state.check_runs if r.id == int(params["id"])), None)
        if run is None:
            raise HttpError(404, "Not Found")
        return 200, check_run_json(run, repo), {}

    def op_list_check_runs(self, repo, params, query, body, user):
        name = (query.get("check_name") or [None])[0]
        runs = [r for r in self.state.check_runs if r.head_sha == params["ref"] and (name is None or r.name == name)]
        status, page, extra = self._page(runs, query, f"/repos/{repo}/commits/{params['ref']}/check-runs")
        return status, {"total_count": len(runs), "check_runs": [check_run_json(r, repo) for r in page]}, extra

    def op_create_status(self, repo, params, query, body, user):
        s = Status(self.state.next_id(), params["sha"], body["state"], body.get("context", "default"), body.get("description") or "")
        self.state.statuses.append(s)
        return 201, status_json(s, user, repo), {}
