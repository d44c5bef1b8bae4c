"""GitHub's rate limits as GitHub documents them: a spent primary limit is waited out until
``x-ratelimit-reset`` (no longer than the run allows, else one line saying when to retry), a
secondary one for its ``retry-after``."""

from __future__ import annotations

import time

from graphmend.cli import main
from tests.bot.conftest import TOKEN, pr_review, write_review
from tests.bot.test_post_scenarios import event_file, post


def test_a_primary_limit_is_waited_out_until_its_reset(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.inject("pulls/list-files", "primary", reset_in=2)
    started = time.monotonic()
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head)),
                           pr_repo.head)
    elapsed = time.monotonic() - started
    assert code == 1 and result["new"] == 3 and len(github.reviews_of(1)) == 1
    assert 1.5 <= elapsed < 15  # the reset, not a fixed 30 s
    answers = [status for method, path, status in github.state.log if path.endswith("/pulls/1/files")]
    assert answers[0] == 403 and answers[-1] == 200 and answers.count(403) == 1  # no hammering before the reset


def test_a_reset_past_the_allowed_wait_fails_at_once_saying_when_to_retry(monkeypatch, capsys, github, pr_repo, tmp_path):
    github.inject("pulls/list-files", "primary", reset_in=600)
    started = time.monotonic()
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code = main(["post", str(review), "--event", str(event_file(tmp_path, 1, pr_repo.head)), "--event-name", "pull_request",
                 "--max-rate-limit-wait", "20"])
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 10
    [line] = err.strip().splitlines()
    assert "primary rate limit" in line and "longer than the 20 s" in line and "retry after 20" in line
    assert github.reviews_of(1) == []


def test_rate_limit_headers():
    from bot.github_client import rate_limit_wait

    now = 1_000_000.0
    assert rate_limit_wait(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000003"}, "", now) == 3
    assert rate_limit_wait(429, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000600"}, "", now) == 600
    assert rate_limit_wait(403, {"retry-after": "7", "x-ratelimit-remaining": "12"}, "secondary", now) == 7
    assert rate_limit_wait(403, {}, "You have exceeded a secondary rate limit", now) == 60  # at least a minute
    assert rate_limit_wait(403, {"x-ratelimit-remaining": "12"}, "Resource not accessible by integration", now) is None
    assert rate_limit_wait(502, {"retry-after": "1"}, "", now) is None
