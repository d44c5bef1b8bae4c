"""The PyGithub wrapper against the local server: pagination and error translation."""

from __future__ import annotations

import pytest

from bot.github_client import GitHubClient, NotFound, PermissionDenied
from tests.bot.conftest import REPO_NAME, RO_TOKEN, TOKEN


def test_every_list_follows_pages(github, pr_repo):
    github.push(REPO_NAME, 1, pr_repo.commit({f"src/m{i}.py": f"y = {i}\n" for i in range(4)}))
    client = GitHubClient(TOKEN, REPO_NAME, base_url=github.url, per_page=2)
    assert len(client.list_files(1)) == 5
    for i in range(5):
        client.create_issue_comment(1, f"c{i}", recheck=lambda: None)
    assert [c.body for c in client.list_issue_comments(1)] == [f"c{i}" for i in range(5)]
    assert len(github.requests("GET", r"/issues/1/comments$")) == 3


def test_errors_are_translated(github, pr_repo):
    ro = GitHubClient(RO_TOKEN, REPO_NAME, base_url=github.url)
    with pytest.raises(PermissionDenied):
        ro.create_issue_comment(1, "x", recheck=lambda: None)
    rw = GitHubClient(TOKEN, REPO_NAME, base_url=github.url)
    with pytest.raises(NotFound):
        rw.get_pull(99)
    assert rw.get_pull(1).head_sha == pr_repo.head


def test_base_url_from_github_api_url(github, monkeypatch):
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    github.add_repo("ent/prise", "/nonexistent")
    assert GitHubClient(TOKEN, "ent/prise").list_issue_comments(5) == []
