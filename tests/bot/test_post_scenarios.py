"""`graphmend post` over real HTTP, with PyGithub, against the local GitHub API server.

Each test is one scenario of the bot's contract: the server validates every request and
response against GitHub's OpenAPI description (the ``server`` fixture fails a test that
produced a violation) and refuses what GitHub refuses.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from graphmend.cli import main
from tests.bot.conftest import (FOLLOW_UP_MODEL, commit_all, git, FP_BRANCH, FP_GUARD, FP_NONZERO, REPO_NAME, RO_TOKEN, TOKEN, finding,
                                pr_review, write_review)


def event_file(tmp_path: Path, number: int, head: str, *, fork: bool = False, name: str = "event.json") -> Path:
    payload = {
        "action": "synchronize",
        "number": number,
        "repository": {"full_name": REPO_NAME},
        "pull_request": {"number": number, "head": {"sha": head, "repo": {"full_name": "someone/models" if fork else REPO_NAME}},
                         "base": {"sha": "0" * 40, "repo": {"full_name": REPO_NAME}}},
    }
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return path


def post(monkeypatch, capsys, server, tmp_path, review: Path, head: str, *, token: str = TOKEN,
         event_name: str = "pull_request", event: Path | None = None, extra: tuple[str, ...] = ()) -> tuple[int, dict, str]:
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("GITHUB_API_URL", server.url)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    summary = tmp_path / "summary.md"
    event = event or event_file(tmp_path, 1, head)
    code = main(["post", str(review), "--event", str(event), "--event-name", event_name, "--summary", str(summary),
                 "--format", "json", *extra])
    captured = capsys.readouterr()
    data = json.loads(captured.out) if code in (0, 1) else {}  # stdout is exactly one JSON document
    return code, data, captured.err


def suggestions(body: str) -> list[str]:
    """The text of each ```suggestion block in a comment body (any fence length)."""
    return [m.group(2) for m in re.finditer(r"^(`{3,})suggestion\n(.*?)^\1$", body, re.S | re.M)]


# ---------------------------------------------------------------------------------------------


def test_two_fixable_and_one_unfixable_break(monkeypatch, capsys, github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)

    assert code == 1 and result["passed"] is False and result["new"] == 3
    [rv] = github.reviews_of(1)
    assert rv.state == "COMMENTED" and rv.commit_id == pr_repo.head
    comments = sorted(github.comments_of(1), key=lambda c: c.line)
    assert [(c.path, c.start_line, c.line) for c in comments] == [("src/model.py", 11, 14), ("src/model.py", 15, 16), ("src/model.py", None, 17)]
    assert [len(suggestions(c.body)) for c in comments] == [1, 1, 0]
    assert "GB0170" in comments[0].body and "gb0170.html" in comments[0].body
    assert "No suggestion" in comments[2].body and "capture\\_dynamic\\_output\\_shape\\_ops" in comments[2].body
    assert "<details><summary>✅ Verification: passed" in comments[0].body
    # the gate: one failing check run with the three annotations
    [run] = github.state.check_runs
    assert run.conclusion == "failure" and run.head_sha == pr_repo.head and len(run.annotations) == 3
    # the sticky comment
    [sticky] = github.issue_comments_of(1)
    assert "<!-- graphmend:sticky -->" in sticky.body and "❌ 3 new" in sticky.body and "```mermaid" in sticky.body
    assert (tmp_path / "summary.md").read_text().count("### New graph breaks") == 1


def apply_suggestions(text: str, comments) -> str:
    lines = text.splitlines(keepends=True)
    for c in sorted(comments, key=lambda c: -c.line):
        for s in suggestions(c.body):
            lines[(c.start_line or c.line) - 1 : c.line] = [s]
    return "".join(lines)


def test_applying_the_suggestions_gives_a_tree_that_verifies(monkeypatch, capsys, github, pr_repo, tmp_path):
    """Apply each posted suggestion to the head file; the result computes the same values with two breaks fewer."""
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)
    head_text = (pr_repo.root / "src" / "model.py").read_text()
    fixed_text = apply_suggestions(head_text, github.comments_of(1))
    assert fixed_text != head_text and "torch.where(h.sum() > 0" in fixed_text

    import torch
    import torch._dynamo

    def load(text: str, name: str):
        ns: dict = {"__name__": name}
        exec(compile(text, f"<{name}>", "exec"), ns)
        torch.manual_seed(0)
        return ns["Model"]().eval()

    before, after = load(head_text, "head"), load(fixed_text, "fixed")
    after.load_state_dict(before.state_dict())
    for x in (torch.randn(2, 4), -torch.ones(2, 4) * 3, torch.ones(2, 4) * 3):
        torch.testing.assert_close(after(x), before(x), rtol=0, atol=0)
    torch._dynamo.reset()
    b = torch._dynamo.explain(before)(torch.ones(2, 4))
    torch._dynamo.reset()
    a = torch._dynamo.explain(after)(torch.ones(2, 4))
    # Only the break no rule fixes is left: the dynamic-shape nonzero.
    assert b.graph_break_count > a.graph_break_count == 1, (b.break_reasons, a.break_reasons)
    assert "nonzero" in str(a.break_reasons[0].reason) or "gb0036" in str(a.break_reasons[0].reason).lower()
    assert [f.lineno for r in a.break_reasons for f in r.user_stack[-1:]] == [13]


def test_three_reruns_post_nothing_twice(monkeypatch, capsys, github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    for _ in range(3):
        code, _, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)
        assert code == 1
    assert len(github.reviews_of(1)) == 1
    assert len(github.issue_comments_of(1)) == 1
    fps = [re.search(r"graphmend:finding (\w+)", c.body).group(1) for c in github.comments_of(1)]
    assert sorted(fps) == sorted({FP_BRANCH, FP_GUARD, FP_NONZERO})
    # on-change: the unchanged sticky comment is not edited again
    assert len(github.requests("PATCH", r"/issues/comments/")) == 0


def test_follow_up_commit_updates_sticky_and_turns_the_gate_green(monkeypatch, capsys, github, pr_repo, tmp_path):
    first = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head), "first.json")
    post(monkeypatch, capsys, github, tmp_path, first, pr_repo.head)
    sticky_before = github.issue_comments_of(1)[0].body

    new_head = pr_repo.commit({"src/model.py": FOLLOW_UP_MODEL})
    github.push(REPO_NAME, 1, new_head)
    data = pr_review(pr_repo.base, new_head)
    data["findings"] = []  # nothing the base lacks is left
    data["targets"][0]["head"] = {"break_count": 0, "graph_count": 1, "error": None}
    second = write_review(tmp_path, data, "second.json")
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, second, new_head, event=event_file(tmp_path, 1, new_head, name="e2.json"))

    assert code == 0 and result["passed"] is True
    [sticky] = github.issue_comments_of(1)
    assert sticky.body != sticky_before and "✅ GraphMend: no new graph breaks" in sticky.body and new_head[:7] in sticky.body
    runs = [r for r in github.state.check_runs if r.head_sha == new_head]
    assert [r.conclusion for r in runs] == ["success"]
    # our comments whose lines changed became outdated and, having no replies, were removed
    assert github.comments_of(1) == [] and result["deleted_comments"] == 3
    assert len(github.reviews_of(1)) == 1  # nothing new to say: no second review


def test_outdated_comment_with_a_reply_is_kept(monkeypatch, capsys, github, pr_repo, tmp_path):
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)), pr_repo.head)
    from tests.github_server.server import ReviewComment

    first = github.comments_of(1)[0]
    github.state.review_comments.append(ReviewComment(9999, 1, first.review_id, first.user, first.path, first.line, None,
                                                      first.line, "why?", first.commit_id, first.commit_id, first.diff_hunk,
                                                      in_reply_to_id=first.id))
    new_head = pr_repo.commit({"src/model.py": FOLLOW_UP_MODEL})
    github.push(REPO_NAME, 1, new_head)
    data = pr_review(pr_repo.base, new_head)
    data["findings"] = []
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data, "b.json"), new_head,
         event=event_file(tmp_path, 1, new_head, name="e2.json"))
    assert sorted(c.id for c in github.comments_of(1)) == sorted([first.id, 9999])


def test_a_pr_cannot_accept_its_own_break_by_editing_the_baseline(monkeypatch, capsys, github, pr_repo, tmp_path):
    """review.json claims the breaks are accepted; the base branch's baseline says otherwise."""
    data = pr_review(pr_repo.base, pr_repo.head)
    for f in data["findings"]:
        f["baselined"] = True  # what the PR's own edit of the baseline would say
    baseline = tmp_path / "graphmend-baseline.json"
    baseline.write_text(json.dumps({"version": 1, "fingerprints": ["ffff" * 5]}))  # the base branch's file
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head,
                           extra=("--baseline", str(baseline)))
    assert code == 1 and result["new"] == 3
    assert github.state.check_runs[-1].conclusion == "failure"


def test_fork_pr_with_a_read_only_token(monkeypatch, capsys, github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code, result, out = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head, token=RO_TOKEN,
                             event=event_file(tmp_path, 1, pr_repo.head, fork=True))
    assert code == 1 and result["mode"] == "read-only" and result["gate"] == "annotations"
    errors = [ln for ln in out.splitlines() if ln.startswith("::error ")]
    assert len(errors) == 3 and all("file=src/model.py" in ln for ln in errors)
    assert "### New graph breaks" in (tmp_path / "summary.md").read_text()
    assert github.state.reviews == [] and github.state.issue_comments == [] and github.state.check_runs == []


def test_no_token_at_all_still_gates(monkeypatch, capsys, github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code, result, out = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head, token="")
    assert code == 1 and result["mode"] == "read-only" and out.count("::error ") == 3
    assert github.state.log == []


def test_forged_head_sha_is_refused(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, "f" * 40)
    code, _, err = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert code == 2 and "refused" in err and err.count("\n") == 1
    assert github.state.reviews == [] and github.state.check_runs == [] and github.state.issue_comments == []


def test_forged_verdict_and_html_are_neutralised(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    data["verdict"] = "passed"
    data["findings"][2]["reason"] = '<img src=x onerror=alert(1)> <!-- graphmend:sticky --> @octocat [click](https://evil.example)'
    data["findings"][2]["decline"] = "</details><script>alert(1)</script>"
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert code == 1 and result["passed"] is False
    bodies = [c.body for c in github.comments_of(1)] + [r.body for r in github.reviews_of(1)] + [c.body for c in github.issue_comments_of(1)]
    joined = "\n".join(bodies)
    assert "<img" not in joined and "<script>" not in joined and "@octocat" not in joined and "](https://evil" not in joined
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;" in joined
    # the forged marker did not create a second sticky comment or confuse the first
    assert sum(b.count("<!-- graphmend:sticky -->") for b in bodies) == 1


def test_invalid_review_json_is_a_usage_error(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    data["findings"][0]["gb_id"] = "GB0170) [x](javascript:alert(1)"
    code, _, err = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert code == 2 and "findings/0/gb_id" in err and github.state.log == []


def test_502_and_secondary_rate_limit_mid_run(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.inject("pulls/list-files", "502")
    github.inject("pulls/create-review", "502", after=True)  # GitHub created it, then the proxy failed
    github.inject("issues/create-comment", "secondary", after=True)
    github.inject("checks/create", "502")
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    start = time.monotonic()
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)
    elapsed = time.monotonic() - start
    assert code == 1 and elapsed < 30  # PyGithub's own policy would sleep 60 s on the secondary limit alone
    assert len(github.reviews_of(1)) == 1 and len(github.comments_of(1)) == 3
    assert len(github.issue_comments_of(1)) == 1 and len(github.state.check_runs) == 1
    assert [f.times for f in github.state.faults] == [0, 0, 0, 0]
    assert len(github.requests("POST", r"/reviews$")) == 1  # re-listed, found by marker, not re-sent


def test_out_of_diff_finding_never_reaches_the_review_api(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    data["findings"].append(finding("d4" * 10, 3, "print() in compiled region", file="src/util.py", rule="GM201",
                                    category="side-effect"))
    data["findings"].append(finding("e5" * 10, 2, "Data-dependent branching", file="src/model.py"))  # file in diff, line not
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert {(c.path, c.line) for c in github.comments_of(1)} == {("src/model.py", 14), ("src/model.py", 16), ("src/model.py", 17)}
    [rv] = github.reviews_of(1)
    assert "2 new finding(s) without an inline comment" in rv.body and "src/util.py:3" in rv.body
    # Annotations stay on the pull request's own files; the check's summary still names the break.
    assert {a["path"] for a in github.state.check_runs[0].annotations} == {"src/model.py"}
    assert "`src/util.py:3`" in github.state.check_runs[0].summary


def test_a_stale_pending_review_of_ours_is_deleted(monkeypatch, capsys, github, pr_repo, tmp_path):
    from tests.github_server.server import Review

    bot = github.state.users[TOKEN]
    github.state.reviews.append(Review(4242, 1, bot, "PENDING", f"<!-- graphmend:review {pr_repo.head} -->", pr_repo.head))
    code, _, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)), pr_repo.head)
    assert [r.state for r in github.reviews_of(1)] == ["COMMENTED"]
    assert github.requests("DELETE", r"/reviews/4242$")


def test_a_comment_github_refuses_goes_to_the_body(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.inject("pulls/create-review", "reject-comment", match="src/model.py:16", times=99)
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)), pr_repo.head)
    [rv] = github.reviews_of(1)
    assert sorted(c.line for c in github.comments_of(1)) == [14, 17]
    assert "src/model.py:15" in rv.body and "1 new finding(s) without an inline comment" in rv.body
    assert any("refused" in n for n in result["notes"])
    assert [r.state for r in github.state.reviews] == ["COMMENTED"]  # the probes' pending reviews are gone


def test_annotations_are_paged_fifty_per_call(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    data["findings"] = [finding(f"{i:020x}", 1 + i % 70, f"break {i}") for i in range(120)]
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    [run] = github.state.check_runs
    assert len(run.annotations) == 120
    assert len(github.requests("POST", "/check-runs$")) == 1 and len(github.requests("PATCH", "/check-runs/")) == 2


def test_a_lost_answer_to_an_annotation_page_does_not_duplicate_it(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.inject("checks/update", "502", after=True)  # the page arrived; its answer did not
    data = pr_review(pr_repo.base, pr_repo.head)
    data["findings"] = [finding(f"{i:020x}", 1 + i % 70, f"break {i}") for i in range(80)]
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    [run] = github.state.check_runs
    assert len(run.annotations) == 80 and len(github.requests("PATCH", "/check-runs/")) == 1
    [rv] = github.reviews_of(1)
    assert len(rv.body) < 65536


def test_checks_not_writable_falls_back_to_a_commit_status(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.state.users[TOKEN].can_write_checks = False
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)), pr_repo.head)
    assert result["gate"] == "status"
    [status] = github.state.statuses
    assert (status.context, status.state, status.sha) == ("graphmend/gate", "failure", pr_repo.head)


def test_workflow_run_event_finds_the_pr_by_head_sha(monkeypatch, capsys, github, pr_repo, tmp_path):
    event = tmp_path / "wr.json"
    event.write_text(json.dumps({"repository": {"full_name": REPO_NAME},
                                 "workflow_run": {"head_sha": pr_repo.head, "pull_requests": []}}))
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)),
                           pr_repo.head, event_name="workflow_run", event=event)
    assert code == 1 and result["review_id"] == github.reviews_of(1)[0].id


def base_with_config(pr_repo, github, config: str, *, head: str | None = None, **files: str) -> tuple[int, str]:
    """A pull request of the same head (or ``head``) onto a base commit that holds ``config`` as
    graphmend.yml (and ``files``, by path)."""
    git(pr_repo.root, "checkout", "-q", pr_repo.base)
    for rel, text in {"graphmend.yml": config, **files}.items():
        (pr_repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (pr_repo.root / rel).write_text(text)
    base = commit_all(pr_repo.root, "configure graphmend")
    git(pr_repo.root, "checkout", "-q", "feature")
    return github.open_pull(REPO_NAME, base, head or pr_repo.head).number, base


def head_of_its_own(pr_repo) -> str:
    """A head commit on a branch of its own, after the pull request's head."""
    git(pr_repo.root, "checkout", "-q", "-b", "another-head", pr_repo.head)
    head = pr_repo.commit({"README.md": "another head\n"})
    git(pr_repo.root, "checkout", "-q", "feature")
    return head


def test_sticky_comment_never_and_always(monkeypatch, capsys, github, pr_repo, tmp_path):
    # The comment policy is the base branch's: review.json may ask for less, never for more.
    # The two pull requests have heads of their own: a post waits up to 32 s for the review of a
    # head another post holds the lock of (bot/post.py, LOCK_WAITS_S), which is not what this checks.
    head = head_of_its_own(pr_repo)
    number, base = base_with_config(pr_repo, github, "review:\n  comment: never\n", head=head)
    never = write_review(tmp_path, pr_review(base, head, comment="always"), "n.json")
    post(monkeypatch, capsys, github, tmp_path, never, head, event=event_file(tmp_path, number, head))
    assert github.issue_comments_of(number) == []
    number, base = base_with_config(pr_repo, github, "review:\n  comment: always\n")
    always = write_review(tmp_path, pr_review(base, pr_repo.head, comment="always"), "a.json")
    event = event_file(tmp_path, number, pr_repo.head)
    post(monkeypatch, capsys, github, tmp_path, always, pr_repo.head, event=event)
    post(monkeypatch, capsys, github, tmp_path, always, pr_repo.head, event=event)
    assert len(github.issue_comments_of(number)) == 1 and len(github.requests("PATCH", r"/issues/comments/")) == 1


def test_one_head_in_two_pull_requests_gets_a_review_in_each_at_once(monkeypatch, capsys, github, pr_repo, tmp_path):
    # One branch opened against two bases: the post lock is the pull request's, so the second post
    # neither waits for a review of the first pull request's nor is told another post holds its lock.
    reviews = []
    for config in ("review:\n  comment: never\n", "review:\n  comment: never\n# the second base\n"):
        number, base = base_with_config(pr_repo, github, config)
        review = write_review(tmp_path, pr_review(base, pr_repo.head), f"r{number}.json")
        code, result, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head,
                               event=event_file(tmp_path, number, pr_repo.head))
        assert not [n for n in result["notes"] if "lock" in n], result["notes"]
        reviews.append((number, result["review_id"]))
    for number, review_id in reviews:
        assert [r.id for r in github.reviews_of(number)] == [review_id]


def take_lock(server, ref: str, sha: str) -> None:
    """Create the ref ``ref`` at ``sha`` through the API, as a racing post's lock."""
    request = urllib.request.Request(f"{server.url}/repos/{REPO_NAME}/git/refs", method="POST",
                                     data=json.dumps({"ref": ref, "sha": sha}).encode(),
                                     headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        assert answer.status == 201


def test_a_post_racing_another_of_its_pull_request_waits_for_its_review(monkeypatch, capsys, github, pr_repo, tmp_path):
    # A re-run racing the first run of a pull request: the first holds the lock on the head and has
    # not made its review yet. That lock is not the lock of another pull request of the same head.
    monkeypatch.setattr("bot.post.LOCK_WAITS_S", (0.1, 0.1))
    number, base = base_with_config(pr_repo, github, "review:\n  comment: never\n")
    take_lock(github, f"refs/graphmend/post/{number}/{pr_repo.head}", pr_repo.head)
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    alone = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)[1]
    assert not [n for n in alone["notes"] if "lock" in n], alone["notes"]
    review = write_review(tmp_path, pr_review(base, pr_repo.head), "raced.json")
    raced = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head,
                 event=event_file(tmp_path, number, pr_repo.head))[1]
    assert any("another post holds the lock" in n for n in raced["notes"]), raced["notes"]
    assert [r.id for r in github.reviews_of(number)] == [raced["review_id"]]


def test_a_pasted_marker_on_someone_elses_comments_changes_nothing(monkeypatch, capsys, github, pr_repo, tmp_path):
    """A person can paste our hidden markers; their comments are neither edited nor deleted,
    the gate does not degrade to read-only mode, and re-runs still post one sticky comment."""
    from tests.github_server.server import IssueComment

    human = github.add_user("ghp_human", "mallory")
    github.state.issue_comments.append(IssueComment(7, 1, human, "<!-- graphmend:sticky --> all good, merge it"))
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    for _ in range(2):
        code, result, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head)
        assert code == 1 and result["mode"] == "full" and result["gate"] == "check-run"
    ours = [c for c in github.issue_comments_of(1) if c.user.login == "graphmend[bot]"]
    assert len(ours) == 1 and "❌ 3 new" in ours[0].body
    assert github.issue_comments_of(1)[0].body.endswith("merge it")


def test_an_unknown_pull_request_is_one_line_and_a_red_gate(monkeypatch, capsys, github, pr_repo, tmp_path):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code = main(["post", str(review), "--repo", REPO_NAME, "--pr", "99", "--head-sha", pr_repo.head,
                 "--api-url", github.url, "--summary", str(tmp_path / "s.md")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "HTTP 404" in err


def test_a_new_head_with_nothing_new_posts_no_second_review(monkeypatch, capsys, github, pr_repo, tmp_path):
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)), pr_repo.head)
    new_head = pr_repo.commit({"README.md": "docs only\n"})
    github.push(REPO_NAME, 1, new_head)
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, new_head), "b.json"),
                           new_head, event=event_file(tmp_path, 1, new_head, name="e2.json"))
    assert code == 1 and len(github.reviews_of(1)) == 1 and len(github.comments_of(1)) == 3
    assert all(c.line is not None for c in github.comments_of(1)) and result["deleted_comments"] == 0
    assert [r.conclusion for r in github.state.check_runs if r.head_sha == new_head] == ["failure"]


def test_at_most_thirty_inline_comments(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    data["findings"] = [finding(f"{i:020x}", 11 + i % 8, f"break {i}") for i in range(35)]
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert result["inline"] == 30 and len(github.comments_of(1)) == 30
    [rv] = github.reviews_of(1)
    assert "5 new finding(s) without an inline comment" in rv.body and "over the inline-comment cap" in rv.body


def test_a_multi_place_fix_is_a_patch_that_git_applies(monkeypatch, capsys, github, pr_repo, tmp_path):
    import subprocess

    data = pr_review(pr_repo.base, pr_repo.head)
    helper = "\n\ndef _select(c, a, b):\n    return torch.where(c, a, b)\n"
    data["findings"][0]["fix"]["edits"] = [
        {"file": "src/model.py", "start_line": 2, "end_line": 1, "new_text": helper, "old_text": ""},
        {"file": "src/model.py", "start_line": 11, "end_line": 14, "new_text": "        h = _select(h.sum() > 0, h * 2, h - 1)\n",
         "old_text": "        if h.sum() > 0:\n            h = h * 2\n        else:\n            h = h - 1\n"},
    ]
    post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    [rv] = github.reviews_of(1)
    [patch] = re.findall(r"^(`{3,})diff\n(.*?)^\1$", rv.body, re.S | re.M)
    (tmp_path / "fix.patch").write_text(patch[1])
    subprocess.run(["git", "apply", "--unidiff-zero", str(tmp_path / "fix.patch")], cwd=pr_repo.root, check=True)
    fixed = (pr_repo.root / "src" / "model.py").read_text()
    assert "def _select(c, a, b):" in fixed and "        h = _select(h.sum() > 0, h * 2, h - 1)\n" in fixed
    assert "if h.sum() > 0" not in fixed and fixed.count("\n") == 18 + 4 - 3
