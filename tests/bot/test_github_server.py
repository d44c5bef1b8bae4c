"""The local GitHub API server itself: it must refuse what GitHub refuses, and requests
that break GitHub's OpenAPI description, or the bot's tests would prove nothing."""

from __future__ import annotations

import requests

from tests.bot.conftest import REPO_NAME, TOKEN


def _post_review(server, payload):
    return requests.post(f"{server.url}/repos/{REPO_NAME}/pulls/1/reviews", json=payload,
                         headers={"Authorization": f"token {TOKEN}", "Accept": "application/vnd.github+json"}, timeout=10)


def test_a_request_that_breaks_the_schema_is_refused_and_recorded(github, pr_repo):
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "MERGE_IT", "body": "x"})
    assert resp.status_code == 422
    assert len(github.state.violations) == 1 and "request POST" in github.state.violations[0]
    assert github.state.reviews == []
    github.state.violations.clear()  # expected here; the fixture fails on any other


def test_comment_outside_the_diff_is_refused(github, pr_repo):
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "x",
                                 "comments": [{"path": "src/model.py", "line": 2, "side": "RIGHT", "body": "no"}]})
    assert resp.status_code == 422 and "part of the diff" in resp.json()["errors"][0]
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "x",
                                 "comments": [{"path": "src/util.py", "line": 3, "side": "RIGHT", "body": "no"}]})
    assert resp.status_code == 422
    assert github.state.reviews == [] and github.state.review_comments == []


def test_start_line_must_precede_line(github, pr_repo):
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "x",
                                 "comments": [{"path": "src/model.py", "line": 12, "start_line": 12, "side": "RIGHT",
                                               "start_side": "RIGHT", "body": "no"}]})
    assert resp.status_code == 422
    ok = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "x",
                               "comments": [{"path": "src/model.py", "line": 12, "start_line": 11, "side": "RIGHT",
                                             "start_side": "RIGHT", "body": "yes"}]})
    assert ok.status_code == 200 and [(c.start_line, c.line) for c in github.state.review_comments] == [(11, 12)]


def test_a_second_pending_review_is_refused(github, pr_repo):
    assert _post_review(github, {"commit_id": pr_repo.head, "body": "draft"}).json()["state"] == "PENDING"
    resp = _post_review(github, {"commit_id": pr_repo.head, "body": "draft 2"})
    assert resp.status_code == 422 and "one pending review" in resp.json()["errors"][0]
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "submitted"})
    assert resp.status_code == 422  # a user with a pending review cannot submit another either


def test_a_body_too_long_is_refused(github, pr_repo):
    resp = _post_review(github, {"commit_id": pr_repo.head, "event": "COMMENT", "body": "x" * 65537})
    assert resp.status_code == 422 and "too long" in resp.json()["errors"][0]


def test_files_carry_real_patches_and_pages_link_onwards(github, pr_repo):
    pr_repo.commit({f"src/extra_{i}.py": f"x = {i}\n" for i in range(3)})
    github.push(REPO_NAME, 1, pr_repo.commit({"src/extra_0.py": "x = 100\n"}))
    h = {"Authorization": f"token {TOKEN}"}
    first = requests.get(f"{github.url}/repos/{REPO_NAME}/pulls/1/files?per_page=2", headers=h, timeout=10)
    assert first.status_code == 200 and len(first.json()) == 2 and 'rel="next"' in first.headers["Link"]
    names = [f["filename"] for f in first.json()]
    nxt = requests.get(first.links["next"]["url"], headers=h, timeout=10).json()
    names += [f["filename"] for f in nxt]
    assert sorted(names) == ["src/extra_0.py", "src/extra_1.py", "src/extra_2.py", "src/model.py"]
    model = next(f for f in first.json() + nxt if f["filename"] == "src/model.py")
    assert model["patch"].startswith("@@ -8,4 +8,11 @@") and "+        if h.sum() > 0:" in model["patch"]


def test_a_read_only_token_cannot_write(github, pr_repo):
    from tests.bot.conftest import RO_TOKEN

    resp = requests.post(f"{github.url}/repos/{REPO_NAME}/issues/1/comments", json={"body": "x"},
                         headers={"Authorization": f"token {RO_TOKEN}"}, timeout=10)
    assert resp.status_code == 403 and github.state.issue_comments == []
