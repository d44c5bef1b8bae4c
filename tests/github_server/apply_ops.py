"""The local server's operations for ``graphmend apply`` (a ``/graphmend apply`` comment on a
pull request): a collaborator's permission level, reading one issue comment, reacting to it,
and a person editing a review comment (the bot's too, with write access, as on GitHub).
Registered by ``server.py`` like ``git_data``'s, validated against the same description.

Permissions are set per repository and login with ``set_permission`` (GitHub's levels:
``admin``, ``maintain``, ``write``, ``triage``, ``read``, ``none``); a login never set reads
as ``read`` (anyone may read a public repository), an unknown login is a 404 as on GitHub.
"""

from __future__ import annotations

from typing import Any

from tests.github_server import spec

OWNER_REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
SPECS = [
    ("GET", OWNER_REPO + r"/collaborators/(?P<username>[^/]+)/permission", "repos/get-collaborator-permission-level",
     "get_permission"),
    ("GET", OWNER_REPO + r"/issues/comments/(?P<id>\d+)", "issues/get-comment", "get_issue_comment"),
    ("POST", OWNER_REPO + r"/issues/comments/(?P<id>\d+)/reactions", "reactions/create-for-issue-comment",
     "create_reaction"),
    # A person with write access edits a review comment (the bot's too), as on GitHub.
    ("PATCH", OWNER_REPO + r"/pulls/comments/(?P<id>\d+)", "pulls/update-review-comment", "update_review_comment"),
]

# GitHub's role names for each permission level (the API's `permission` folds maintain into
# write and triage into read, as GitHub does).
_ROLE_TO_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read",
                       "none": "none"}


def _state(state: Any) -> Any:
    if not hasattr(state, "permissions"):
        state.permissions = {}  # (repo, login) -> role
        state.reactions = []  # (comment id, login, content)
    return state


def set_permission(server: Any, repo: str, login: str, role: str) -> None:
    assert role in _ROLE_TO_PERMISSION, role
    _state(server.state).permissions[(repo, login)] = role


def add_issue_comment(server: Any, number: int, login: str, body: str) -> int:
    """A comment on pull request ``number`` by the (existing) user ``login``; returns its id."""
    srv = server_module()
    user = next(u for u in server.state.users.values() if u.login == login)
    comment = srv.IssueComment(server.state.next_id(), number, user, body)
    server.state.issue_comments.append(comment)
    return comment.id


def reactions(server: Any, comment_id: int) -> list[str]:
    return [content for cid, _login, content in _state(server.state).reactions if cid == comment_id]


def server_module() -> Any:
    from tests.github_server import server  # the module that imports this one

    return server


class ApplyOps:
    """Mixed into the server's request handler; ``op_*`` as in server.py."""

    def op_get_permission(self, repo, params, query, body, user):
        srv = server_module()
        login = params["username"]
        known = next((u for u in self.state.users.values() if u.login == login), None)
        if known is None:
            raise srv.HttpError(404, "Not Found")
        role = _state(self.state).permissions.get((repo, login), "read")
        d = spec.example("repository-collaborator-permission-response-if-user-has-admin-permissions")
        d.update(permission=_ROLE_TO_PERMISSION[role], role_name=role)
        # GitHub's example user lacks the role_name its own schema requires; the server adds it.
        d["user"].update(login=known.login, id=known.id, role_name=role)
        return 200, d, {}

    def op_get_issue_comment(self, repo, params, query, body, user):
        srv = server_module()
        c = next((c for c in self.state.issue_comments if c.id == int(params["id"])), None)
        if c is None:
            raise srv.HttpError(404, "Not Found")
        return 200, srv.issue_comment_json(c, repo), {}

    def op_create_reaction(self, repo, params, query, body, user):
        srv = server_module()
        cid = int(params["id"])
        if not any(c.id == cid for c in self.state.issue_comments):
            raise srv.HttpError(404, "Not Found")
        state = _state(self.state)
        exists = (cid, user.login, body["content"]) in state.reactions
        if not exists:
            state.reactions.append((cid, user.login, body["content"]))
        d = spec.example("reaction")
        d.update(id=self.state.next_id(), content=body["content"], user=srv._user(user))
        return (200 if exists else 201), d, {}

    def op_update_review_comment(self, repo, params, query, body, user):
        srv = server_module()
        c = next((c for c in self.state.review_comments if c.id == int(params["id"])), None)
        if c is None:
            raise srv.HttpError(404, "Not Found")
        role = _state(self.state).permissions.get((repo, user.login), "read")
        if c.user is not user and _ROLE_TO_PERMISSION[role] not in ("admin", "write"):
            raise srv.HttpError(403, "Must have write access to the repository to edit another user's comment.")
        if len(body.get("body") or "") > srv.MAX_BODY:
            raise srv.HttpError(422, "Validation Failed", [f"Body is too long (maximum is {srv.MAX_BODY} characters)"])
        c.body = body["body"]
        return 200, srv.review_comment_json(c, repo), {}
