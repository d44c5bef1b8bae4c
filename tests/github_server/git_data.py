"""The local server's operations for the scan's fix pull request and for GitHub App auth.

Registered by ``server.py`` (its ``ROUTES`` and handler take these in), validated against the
same OpenAPI description as every other operation:

- the Git Data API on the repository's real git directory: blobs (``git hash-object -w``),
  trees on a base tree (a temporary index: ``read-tree`` + ``update-index`` + ``write-tree``),
  commits (``commit-tree``), refs (create; update, fast-forward only unless ``force``);
- pull requests opened from a branch and updated (title, body, state); a pull request's head
  follows its branch, as on GitHub, when the ref moves;
- GitHub App auth: ``POST /app/installations/{id}/access_tokens`` and
  ``GET /repos/{owner}/{repo}/installation`` take a JWT (``Authorization: Bearer``) that must be
  signed RS256 with the app's private key: the server checks the signature with the app's
  public key, the issuer (the app id) and the expiry, as GitHub does. An installation token it
  hands out is a working token for the installation's repository.

What it refuses, as GitHub does: a ref that already exists (422), a non-fast-forward update
without ``force`` (422), a second open pull request from the same branch (422), a tree entry
whose blob does not exist (422), a JWT that is unsigned, signed with another key, expired or
issued for another app (401).
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

from tests.github_server import spec

OWNER_REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
SPECS = [
    ("POST", OWNER_REPO + r"/git/blobs", "git/create-blob", "create_blob"),
    ("GET", OWNER_REPO + r"/git/trees/(?P<sha>[0-9a-f]{40})", "git/get-tree", "get_tree"),
    ("POST", OWNER_REPO + r"/git/trees", "git/create-tree", "create_tree"),
    ("GET", OWNER_REPO + r"/git/commits/(?P<sha>[0-9a-f]{40})", "git/get-commit", "get_git_commit"),
    ("POST", OWNER_REPO + r"/git/commits", "git/create-commit", "create_git_commit"),
    ("GET", OWNER_REPO + r"/git/ref/(?P<ref>.+)", "git/get-ref", "get_ref"),
    ("POST", OWNER_REPO + r"/git/refs", "git/create-ref", "create_ref"),
    ("PATCH", OWNER_REPO + r"/git/refs/(?P<ref>.+)", "git/update-ref", "update_ref"),
    ("POST", OWNER_REPO + r"/pulls", "pulls/create", "create_pull"),
    ("PATCH", OWNER_REPO + r"/pulls/(?P<n>\d+)", "pulls/update", "update_pull"),
    ("GET", OWNER_REPO + r"/installation", "apps/get-repo-installation", "get_repo_installation"),
    ("POST", r"/app/installations/(?P<installation>\d+)/access_tokens", "apps/create-installation-access-token",
     "create_installation_token"),
]
# Operations authenticated as the app itself (a JWT), not with a token.
JWT_OPS = {"apps/create-installation-access-token", "apps/get-repo-installation"}


_REF_PATH = re.compile(r"^(/repos/[^/]+/[^/]+/git/refs?/)(.+)$")


def validation_path(path: str) -> str:
    """The path as the description's template can match it.

    GitHub takes a ref with its slashes in the path (``/git/ref/heads/graphmend/scan-fixes``),
    but an OpenAPI path parameter matches one segment; the ref is validated as one encoded
    segment, which is what the template means.
    """
    m = _REF_PATH.match(path)
    return m.group(1) + m.group(2).replace("/", "%2F") if m else path


@dataclass
class App:
    app_id: int
    public_key_pem: str
    slug: str


@dataclass
class Installation:
    id: int
    app: App
    repo: str


def _apps(state: Any) -> dict[int, App]:
    if not hasattr(state, "apps"):
        state.apps = {}
        state.installations = {}
        state.tokens_issued = []
    return state.apps


def add_app(server: Any, app_id: int, public_key_pem: str, installation_id: int, repo: str, slug: str = "graphmend") -> App:
    """Register a GitHub App (its public key) installed on ``repo``."""
    apps = _apps(server.state)
    app = apps.setdefault(app_id, App(app_id, public_key_pem, slug))
    server.state.installations[installation_id] = Installation(installation_id, app, repo)
    return app


def _git(git_dir: str, *args: str, input: Optional[bytes] = None, env: Optional[dict] = None) -> str:
    done = subprocess.run(["git", *args], cwd=git_dir, input=input, capture_output=True, env=env)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout.decode().strip()


def _object_type(git_dir: str, sha: str) -> Optional[str]:
    try:
        return _git(git_dir, "cat-file", "-t", sha)
    except subprocess.CalledProcessError:
        return None


def _iso(ts: int) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class GitDataOps:
    """Mixed into the server's request handler; ``op_*`` as in server.py."""

    def _srv(self) -> Any:
        from tests.github_server import server  # the module that imports this one

        return server

    def _git_dir(self, repo: str) -> str:
        return self.state.repos[repo]["git_dir"]

    # -- Git Data API -----------------------------------------------------------------------------

    def op_create_blob(self, repo, params, query, body, user):
        srv = self._srv()
        encoding = body.get("encoding", "utf-8")
        if encoding not in ("utf-8", "base64"):
            raise srv.HttpError(422, "Validation Failed", [f"encoding {encoding!r} is not supported"])
        data = base64.b64decode(body["content"]) if encoding == "base64" else body["content"].encode("utf-8")
        sha = _git(self._git_dir(repo), "hash-object", "-w", "--stdin", input=data)
        d = spec.example("short-blob")
        d.update(sha=sha, url=srv._api(f"/repos/{repo}/git/blobs/{sha}"))
        return 201, d, {}

    def op_get_tree(self, repo, params, query, body, user):
        srv = self._srv()
        git_dir, sha = self._git_dir(repo), params["sha"]
        if _object_type(git_dir, sha) not in ("tree", "commit"):
            raise srv.HttpError(404, "Not Found")
        recursive = bool((query.get("recursive") or [""])[0])
        rows = _git(git_dir, "ls-tree", "-l", *(["-r", "-t"] if recursive else []), sha).splitlines()
        entries = []
        for row in rows:
            meta, path = row.split("\t", 1)
            mode, kind, obj, size = meta.split()
            entry = {"path": path, "mode": mode, "type": kind, "sha": obj,
                     "url": srv._api(f"/repos/{repo}/git/{kind}s/{obj}")}
            if kind == "blob":
                entry["size"] = int(size)
            entries.append(entry)
        tree_sha = _git(git_dir, "rev-parse", f"{sha}^{{tree}}")
        d = spec.example("git-tree")
        d.update(sha=tree_sha, tree=entries, truncated=False, url=srv._api(f"/repos/{repo}/git/trees/{tree_sha}"))
        return 200, d, {}

    def op_create_tree(self, repo, params, query, body, user):
        srv = self._srv()
        git_dir = self._git_dir(repo)
        base_tree = body.get("base_tree")
        with tempfile.TemporaryDirectory(prefix="gh-index-") as tmp:
            env = dict(os.environ, GIT_INDEX_FILE=os.path.join(tmp, "index"))
            if base_tree:
                if _object_type(git_dir, base_tree) != "tree":
                    raise srv.HttpError(422, "Invalid tree info", ["base_tree is not a tree"])
                _git(git_dir, "read-tree", base_tree, env=env)
            for entry in body["tree"]:
                path = entry.get("path") or ""
                if not path or path.startswith("/") or ".." in path.split("/"):
                    raise srv.HttpError(422, "Invalid tree info", [f"bad path {path!r}"])
                if "content" in entry and entry.get("sha"):
                    raise srv.HttpError(422, "Invalid tree info", ["use either sha or content"])
                if "content" in entry:
                    sha = _git(git_dir, "hash-object", "-w", "--stdin", input=entry["content"].encode("utf-8"))
                elif entry.get("sha") is None:
                    _git(git_dir, "update-index", "--force-remove", "--", path, env=env)
                    continue
                else:
                    sha = entry["sha"]
                if _object_type(git_dir, sha) != entry.get("type", "blob"):
                    raise srv.HttpError(422, "Invalid tree info", [f"{path}: {sha} is not a {entry.get('type', 'blob')}"])
                _git(git_dir, "update-index", "--add", "--cacheinfo", f"{entry.get('mode', '100644')},{sha},{path}", env=env)
            tree = _git(git_dir, "write-tree", env=env)
        return 201, self._tree_json(repo, tree), {}

    def _tree_json(self, repo: str, tree: str) -> dict:
        status, d, _ = self.op_get_tree(repo, {"sha": tree}, {}, {}, None)
        return d

    def _commit_json(self, repo: str, sha: str) -> dict:
        srv = self._srv()
        git_dir = self._git_dir(repo)
        fmt = "%T%n%P%n%an%n%ae%n%at%n%cn%n%ce%n%ct%n%B"
        tree, parents, an, ae, at, cn, ce, ct, message = _git(git_dir, "show", "-s", f"--format={fmt}", sha).split("\n", 8)
        d = spec.example("git-commit")
        d.update(
            sha=sha, node_id=f"C_{sha[:12]}", url=srv._api(f"/repos/{repo}/git/commits/{sha}"),
            html_url=f"https://github.test/{repo}/commit/{sha}", message=message,
            author={"name": an, "email": ae, "date": _iso(int(at))},
            committer={"name": cn, "email": ce, "date": _iso(int(ct))},
            tree={"sha": tree, "url": srv._api(f"/repos/{repo}/git/trees/{tree}")},
            parents=[{"sha": p, "url": srv._api(f"/repos/{repo}/git/commits/{p}"),
                      "html_url": f"https://github.test/{repo}/commit/{p}"} for p in parents.split()],
        )
        d["verification"] = {"verified": False, "reason": "unsigned", "signature": None, "payload": None, "verified_at": None}
        return d

    def op_get_git_commit(self, repo, params, query, body, user):
        if _object_type(self._git_dir(repo), params["sha"]) != "commit":
            raise self._srv().HttpError(404, "Not Found")
        return 200, self._commit_json(repo, params["sha"]), {}

    def op_create_git_commit(self, repo, params, query, body, user):
        srv = self._srv()
        git_dir = self._git_dir(repo)
        if _object_type(git_dir, body["tree"]) != "tree":
            raise srv.HttpError(422, "Tree SHA does not exist")
        parents = body.get("parents") or []
        for p in parents:
            if _object_type(git_dir, p) != "commit":
                raise srv.HttpError(422, "Parent SHA does not exist or is not a commit object")
        email = f"{user.id}+{user.login}@users.noreply.github.com"
        author = body.get("author") or {"name": user.login, "email": email}
        env = dict(os.environ, GIT_AUTHOR_NAME=author["name"], GIT_AUTHOR_EMAIL=author["email"],
                   GIT_COMMITTER_NAME=user.login, GIT_COMMITTER_EMAIL=email)
        args = ["commit-tree", body["tree"]]
        for p in parents:
            args += ["-p", p]
        sha = _git(git_dir, *args, input=body["message"].encode("utf-8"), env=env)
        return 201, self._commit_json(repo, sha), {}

    def _ref_json(self, repo: str, ref: str, sha: str) -> dict:
        srv = self._srv()
        d = spec.example("git-ref")
        d.update(ref=ref, node_id=f"REF_{sha[:12]}", url=srv._api(f"/repos/{repo}/git/{ref}"))
        d["object"] = {"type": "commit", "sha": sha, "url": srv._api(f"/repos/{repo}/git/commits/{sha}")}
        return d

    def _ref_sha(self, repo: str, ref: str) -> Optional[str]:
        try:
            return _git(self._git_dir(repo), "rev-parse", "--verify", "--quiet", f"refs/{ref}^{{commit}}")
        except subprocess.CalledProcessError:
            return None

    def op_get_ref(self, repo, params, query, body, user):
        sha = self._ref_sha(repo, params["ref"])
        if sha is None:
            raise self._srv().HttpError(404, "Not Found")
        return 200, self._ref_json(repo, f"refs/{params['ref']}", sha), {}

    def op_create_ref(self, repo, params, query, body, user):
        srv = self._srv()
        ref, sha = body["ref"], body["sha"]
        if not re.match(r"^refs/[^/]+/.+", ref):
            raise srv.HttpError(422, "Reference name is invalid")
        if self._ref_sha(repo, ref[len("refs/"):]) is not None:
            raise srv.HttpError(422, "Reference already exists")
        if _object_type(self._git_dir(repo), sha) != "commit":
            raise srv.HttpError(422, "Object does not exist")
        _git(self._git_dir(repo), "update-ref", ref, sha, "")
        self._follow(repo, ref, sha)
        return 201, self._ref_json(repo, ref, sha), {}

    def op_update_ref(self, repo, params, query, body, user):
        srv = self._srv()
        git_dir = self._git_dir(repo)
        ref, sha = f"refs/{params['ref']}", body["sha"]
        old = self._ref_sha(repo, params["ref"])
        if old is None:
            raise srv.HttpError(422, "Reference does not exist")
        if _object_type(git_dir, sha) != "commit":
            raise srv.HttpError(422, "Object does not exist")
        if not body.get("force"):
            try:
                _git(git_dir, "merge-base", "--is-ancestor", old, sha)
            except subprocess.CalledProcessError:
                raise srv.HttpError(422, "Update is not a fast forward") from None
        _git(git_dir, "update-ref", ref, sha, old)
        self._follow(repo, ref, sha)
        return 200, self._ref_json(repo, ref, sha), {}

    def _follow(self, repo: str, ref: str, sha: str) -> None:
        """An open pull request's head is its branch: it moves when the branch does."""
        if not ref.startswith("refs/heads/"):
            return
        branch = ref[len("refs/heads/"):]
        for (r, _n), pull in self.state.pulls.items():
            if r == repo and pull.head_ref == branch and pull.state == "open":
                pull.head_sha = sha

    # -- pull requests from a branch ----------------------------------------------------------

    def op_create_pull(self, repo, params, query, body, user):
        srv = self._srv()
        head = body.get("head") or ""
        owner = repo.split("/")[0]
        branch = head.split(":", 1)[1] if ":" in head else head
        if ":" in head and head.split(":", 1)[0] != owner:
            raise srv.HttpError(422, "Validation Failed", ["head: cross-repository pull requests are not served here"])
        head_sha, base_sha = self._ref_sha(repo, f"heads/{branch}"), self._ref_sha(repo, f"heads/{body.get('base', '')}")
        if head_sha is None or base_sha is None:
            raise srv.HttpError(422, "Validation Failed", [f"{'head' if head_sha is None else 'base'}: invalid branch"])
        if any(p.repo == repo and p.head_ref == branch and p.state == "open" for p in self.state.pulls.values()):
            raise srv.HttpError(422, "Validation Failed", [f"A pull request already exists for {owner}:{branch}."])
        if head_sha == base_sha or not _git(self._git_dir(repo), "rev-list", f"{base_sha}..{head_sha}"):
            raise srv.HttpError(422, "Validation Failed", [f"No commits between {body['base']} and {branch}"])
        if len(body.get("body") or "") > srv.MAX_BODY:
            raise srv.HttpError(422, "Validation Failed", [f"Body is too long (maximum is {srv.MAX_BODY} characters)"])
        number = 1 + sum(1 for (r, _n) in self.state.pulls if r == repo)
        pull = srv.Pull(number, repo, self._git_dir(repo), base_sha, head_sha, repo, base_ref=body["base"], head_ref=branch)
        pull.title, pull.body, pull.user = body.get("title") or "", body.get("body") or "", user
        self.state.pulls[(repo, number)] = pull
        return 201, self._pull_json(pull), {}

    def _pull_json(self, pull: Any) -> dict:
        d = self._srv().pull_json(pull)
        d.update(title=getattr(pull, "title", d.get("title")), body=getattr(pull, "body", d.get("body")))
        if getattr(pull, "user", None) is not None:
            d["user"] = self._srv()._user(pull.user)
        return d

    def op_update_pull(self, repo, params, query, body, user):
        srv = self._srv()
        pull = self._pull(repo, params)
        if len(body.get("body") or "") > srv.MAX_BODY:
            raise srv.HttpError(422, "Validation Failed", [f"Body is too long (maximum is {srv.MAX_BODY} characters)"])
        for key in ("title", "body"):
            if key in body:
                setattr(pull, key, body[key])
        if "state" in body:
            if body["state"] == "open" and pull.state == "closed":
                live = self._ref_sha(repo, f"heads/{pull.head_ref}")
                if live is None:
                    raise srv.HttpError(422, "Validation Failed", ["state cannot be changed: the head branch was deleted"])
                pull.head_sha = live
            pull.state = body["state"]
        return 200, self._pull_json(pull), {}

    # -- GitHub App auth --------------------------------------------------------------------------

    def app_dispatch(self, op: str, fn: str, params: dict, query: dict, raw: bytes) -> tuple[int, Any, dict]:
        """Operations authenticated by the app's JWT instead of a token."""
        srv = self._srv()
        try:
            app = self._jwt_app()
            body = __import__("json").loads(raw) if raw else {}
            with self.state.lock:
                return getattr(self, "op_" + fn)(app, params, query, body)
        except srv.HttpError as err:
            return err.status, err.payload(), err.headers

    def _jwt_app(self) -> App:
        import jwt  # PyJWT, with cryptography for RS256

        srv = self._srv()
        value = self.headers.get("Authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or token.count(".") != 2:
            raise srv.HttpError(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
            app = _apps(self.state).get(int(claims.get("iss")))
        except (jwt.PyJWTError, TypeError, ValueError):
            raise srv.HttpError(401, "A JSON web token could not be decoded") from None
        if app is None:
            raise srv.HttpError(401, "Integration not found")
        try:
            # GitHub: RS256 only, exp at most 10 minutes ahead, iat not in the future (60 s leeway).
            claims = jwt.decode(token, app.public_key_pem, algorithms=["RS256"], options={"require": ["exp", "iat", "iss"]},
                                leeway=60)
        except jwt.PyJWTError as exc:
            raise srv.HttpError(401, f"A JSON web token could not be verified: {type(exc).__name__}") from None
        if claims["exp"] - time.time() > 600 + 60:
            raise srv.HttpError(401, "'Expiration time' claim ('exp') is too far in the future")
        return app

    def op_create_installation_token(self, app, params, query, body):
        srv = self._srv()
        inst = self.state.installations.get(int(params["installation"]))
        if inst is None or inst.app is not app:
            raise srv.HttpError(404, "Not Found")
        token = f"ghs_{os.urandom(18).hex()}"
        # An installation token acts as the app's bot user on the installation's repository.
        login = f"{app.slug}[bot]"
        existing = next((u for u in self.state.users.values() if u.login == login), None)
        self.state.users[token] = existing or srv.User(login, self.state.next_id())
        self.state.tokens_issued.append((inst.id, token))
        d = spec.example("installation-token")
        d.update(token=token, expires_at=_iso(int(time.time()) + 3600),
                 permissions={"contents": "write", "pull_requests": "write", "issues": "write", "checks": "write"},
                 repository_selection="selected")
        d.pop("repositories", None)
        return 201, d, {}

    def op_get_repo_installation(self, app, params, query, body):
        srv = self._srv()
        repo = f"{params['owner']}/{params['repo']}"
        inst = next((i for i in self.state.installations.values() if i.repo == repo and i.app is app), None)
        if inst is None:
            raise srv.HttpError(404, "Not Found")
        d = spec.example("installation")
        d.update(id=inst.id, app_id=app.app_id, app_slug=app.slug,
                 access_tokens_url=srv._api(f"/app/installations/{inst.id}/access_tokens"),
                 repositories_url=srv._api("/installation/repositories"))
        return 200, d, {}
