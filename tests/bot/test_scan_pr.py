"""The scan's fix pull request against the local GitHub server (real HTTP, real git objects):
one branch and one pull request, a single commit made through the Git Data API, updated by
force-moving the ref, left alone when nothing changed, closed with one comment when nothing is
left to fix; retries never open a second pull request."""

from __future__ import annotations

import pytest

from bot import scan_pr
from bot.github_client import GitHubClient
from bot.retry import Policy
from tests.bot.conftest import REPO_NAME, TOKEN, git

FIXED = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return h  # fixed
'''


def plan(base: str, *, files=None, title: str = "predicate the branch with torch.where") -> scan_pr.ScanPlan:
    files = (("src/model.py", FIXED),) if files is None else files
    fixes = tuple(scan_pr.PlannedFix("GM101", title, "safe", path, 11, "equivalent on 4 input case(s), verified alone",
                                     3, 2, 0.0, "net: cold start 2.00 s -> 1.00 s") for path, _ in files)
    return scan_pr.ScanPlan("main", base, files, fixes,
                            (scan_pr.Withheld("GM301", "src/model.py", 15, "failed verification: <b>differs</b>"),), 3)


@pytest.fixture
def client(github):
    return GitHubClient(TOKEN, REPO_NAME, base_url=github.url, sleep=lambda s: None, policy=Policy(attempts=4))


def scan_pulls(server):
    return [p for p in server.state.pulls.values() if p.head_ref == scan_pr.BRANCH]


def test_opens_one_pull_request_with_a_single_commit_on_the_scanned_commit(github, pr_repo, client):
    out = scan_pr.publish(client, plan(pr_repo.base))
    assert out.action == "opened" and out.number == 2  # #1 is the fixture's own pull request
    root = pr_repo.root
    assert git(root, "rev-parse", f"refs/heads/{scan_pr.BRANCH}") == out.commit
    assert git(root, "rev-list", "--parents", "-n", "1", out.commit).split() == [out.commit, pr_repo.base]
    assert git(root, "diff", "--name-only", pr_repo.base, out.commit) == "src/model.py"
    assert git(root, "show", f"{out.commit}:src/model.py") == FIXED.rstrip("\n")
    assert git(root, "show", f"{out.commit}:src/util.py") == git(root, "show", f"{pr_repo.base}:src/util.py")
    [pull] = scan_pulls(github)
    assert (pull.state, pull.base_ref, pull.head_sha, pull.base_sha) == ("open", "main", out.commit, pr_repo.base)
    assert pull.body.startswith(scan_pr.MARKER)
    assert "| `src/model.py:11` | GM101 |" in pull.body and "equivalent on 4 input case" in pull.body
    assert "cold start 2.00 s -&gt; 1.00 s" in pull.body
    assert "&lt;b&gt;differs&lt;/b&gt;" in pull.body and "<b>" not in pull.body  # untrusted text is inert
    assert git(root, "log", "-1", "--format=%an", out.commit) == "graphmend[bot]"
    # The fixture's own pull request was not touched.
    assert github.state.pulls[(REPO_NAME, 1)].head_ref == "feature"


def test_a_rerun_with_the_same_fixes_pushes_nothing(github, pr_repo, client):
    first = scan_pr.publish(client, plan(pr_repo.base))
    again = scan_pr.publish(client, plan(pr_repo.base))
    assert again == scan_pr.Outcome("unchanged", first.number, first.commit)
    assert github.requests("POST", r"/git/commits$") == [("POST", f"/repos/{REPO_NAME}/git/commits", 201)]
    assert github.requests("PATCH", r"/git/refs/") == []
    assert len(scan_pulls(github)) == 1


def test_the_next_scan_force_updates_the_branch_and_the_same_pull_request(github, pr_repo, client):
    first = scan_pr.publish(client, plan(pr_repo.base))
    # The default branch moves on (an unrelated commit); the scan of it rebuilds the one commit.
    git(pr_repo.root, "checkout", "-q", "main")
    new_main = pr_repo.commit({"README.md": "models\n"}, "docs")
    second_files = (("src/model.py", FIXED), ("src/util.py", "def helper_0(x):\n    return x\n"))
    second = scan_pr.publish(client, plan(new_main, files=second_files))
    assert second.action == "updated" and second.number == first.number and second.commit != first.commit
    root = pr_repo.root
    assert git(root, "rev-parse", f"refs/heads/{scan_pr.BRANCH}") == second.commit
    assert git(root, "rev-list", "--parents", "-n", "1", second.commit).split() == [second.commit, new_main]
    # A rebuilt commit, not a commit on top: the old one is no ancestor (the ref was forced).
    assert first.commit not in git(root, "rev-list", second.commit).split()
    assert sorted(git(root, "diff", "--name-only", new_main, second.commit).split()) == ["src/model.py", "src/util.py"]
    assert [r[2] for r in github.requests("PATCH", r"/git/refs/heads/")] == [200]
    [pull] = scan_pulls(github)
    assert pull.head_sha == second.commit and "src/util.py" in pull.body
    assert pull.title == "GraphMend: 2 verified graph-break fixes"


def test_nothing_left_to_fix_closes_it_with_one_comment(github, pr_repo, client):
    first = scan_pr.publish(client, plan(pr_repo.base))
    empty = scan_pr.ScanPlan("main", pr_repo.base, (), ())
    closed = scan_pr.publish(client, empty)
    assert closed == scan_pr.Outcome("closed", first.number, None)
    [pull] = scan_pulls(github)
    assert pull.state == "closed"
    [comment] = github.issue_comments_of(first.number)
    assert comment.body.startswith(scan_pr.CLOSED_MARKER) and "Nothing is left to fix" in comment.body
    # Again: no open pull request, nothing to do; no second comment.
    assert scan_pr.publish(client, empty) == scan_pr.Outcome("none", None, None)
    assert len(github.issue_comments_of(first.number)) == 1
    # Fixes again later: a new pull request from the same branch, force-moved.
    reopened = scan_pr.publish(client, plan(pr_repo.base, title="another fix"))
    assert reopened.action == "opened" and reopened.number == first.number + 1


def test_a_502_after_the_pull_request_was_made_does_not_open_a_second(github, pr_repo, client):
    github.inject("pulls/create", "502", after=True)
    github.inject("git/create-ref", "502", after=True)
    github.inject("git/create-blob", "secondary")
    out = scan_pr.publish(client, plan(pr_repo.base))
    assert out.action == "opened"
    assert len(scan_pulls(github)) == 1
    assert [r[2] for r in github.requests("POST", r"/pulls$")] == [502]  # found by its branch, not re-sent
    assert [r[2] for r in github.requests("POST", r"/git/refs$")] == [502]


def test_a_read_only_token_fails_in_one_line(github, pr_repo):
    from bot.github_client import PermissionDenied
    from tests.bot.conftest import RO_TOKEN

    ro = GitHubClient(RO_TOKEN, REPO_NAME, base_url=github.url, sleep=lambda s: None)
    with pytest.raises(PermissionDenied, match="403"):
        scan_pr.publish(ro, plan(pr_repo.base))
    assert scan_pulls(github) == []


def test_a_pull_request_a_person_closed_is_not_reopened_for_the_same_fixes(github, pr_repo, client):
    first = scan_pr.publish(client, plan(pr_repo.base))
    github.state.pulls[(REPO_NAME, first.number)].state = "closed"  # closed in the UI, not merged
    again = scan_pr.publish(client, plan(pr_repo.base))
    assert again == scan_pr.Outcome("declined", first.number, first.commit)
    assert len(scan_pulls(github)) == 1 and github.requests("POST", r"/pulls$") == [("POST", f"/repos/{REPO_NAME}/pulls", 201)]
    # Different fixes are a new proposal: a new pull request.
    other = scan_pr.publish(client, plan(pr_repo.base, files=(("src/model.py", FIXED + "# more\n"),)))
    assert other.action == "opened" and other.number == first.number + 1
