"""Five posts of one head at once (a re-run racing the first run) leave one review with one set
of inline comments and one sticky comment."""

from __future__ import annotations

import threading

from bot.post import Poster, PullTarget, connect
from bot.review import from_json
from tests.bot.conftest import REPO_NAME, TOKEN, pr_review


def _race(server, review, head: str, n: int = 5) -> list:
    start = threading.Barrier(n)
    results: list = [None] * n

    def one(i: int) -> None:
        client = connect(TOKEN, REPO_NAME, server.url)
        poster = Poster(client, PullTarget(REPO_NAME, 1, head), out=lambda _line: None)
        start.wait()
        results[i] = poster.post(review)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_five_racing_posts_make_one_review_and_one_sticky_comment(github, pr_repo):
    review = from_json(pr_review(pr_repo.base, pr_repo.head))
    results = _race(github, review, pr_repo.head)

    assert all(r is not None and r.exit_code == 1 for r in results)
    assert len(github.reviews_of(1)) == 1
    assert len(github.comments_of(1)) == 3  # one inline comment per new break, once
    assert len(github.issue_comments_of(1)) == 1
    assert len({r.review_id for r in results}) == 1  # every run names the one review
    assert len({r.sticky_id for r in results}) == 1


def test_racing_posts_after_the_first_run_still_leave_one_of_each(github, pr_repo):
    review = from_json(pr_review(pr_repo.base, pr_repo.head))
    _race(github, review, pr_repo.head, n=2)
    _race(github, review, pr_repo.head, n=5)
    assert len(github.reviews_of(1)) == 1 and len(github.issue_comments_of(1)) == 1
