"""The bot's own retry policy (PyGithub's built-in retries are turned off).

PyGithub's default retries POSTs on 5xx and 403 and sleeps 60 s on a secondary rate limit:
a review that GitHub created before answering 502 would be created twice, and tests would
wait minutes. Here, reads are simply retried. A write is never blindly repeated: after a
transient failure the caller's ``recheck`` lists what exists (by hidden marker) and the write
is repeated only when it did not happen.

Rate limits are waited out as GitHub documents them: a spent primary limit
(``x-ratelimit-remaining: 0``) until ``x-ratelimit-reset``, a secondary limit for its
``retry-after`` (at least a minute when it gives none). A wait longer than
``Policy.max_rate_limit_wait_s`` is not taken: ``RetryLater`` says when to try again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


class TransientError(Exception):
    """A failure worth retrying: 5xx, a rate limit, a dropped connection. ``rate_limit``: GitHub
    asked for exactly ``wait_s`` seconds (not a backoff guess)."""

    def __init__(self, message: str, wait_s: float = 1.0, *, rate_limit: bool = False):
        super().__init__(message)
        self.wait_s = wait_s
        self.rate_limit = rate_limit


class RetryLater(Exception):
    """GitHub's rate limit asks for a longer wait than this run may take; ``str()`` is one line
    saying when to retry."""


@dataclass(frozen=True)
class Policy:
    attempts: int = 4
    max_wait_s: float = 30.0  # never back off longer than this on a 5xx or a lost connection
    base_wait_s: float = 0.5
    max_rate_limit_wait_s: float = 300.0  # the longest wait for a rate limit to reset

    def wait(self, err: TransientError, attempt: int) -> float:
        """What GitHub asked for on a rate limit (``RetryLater`` past ``max_rate_limit_wait_s``),
        else the server's hint or exponential backoff, capped."""
        if err.rate_limit:
            if err.wait_s > self.max_rate_limit_wait_s:
                at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() + err.wait_s))
                raise RetryLater(f"{err}; it resets in {err.wait_s:.0f} s, longer than the {self.max_rate_limit_wait_s:.0f} s "
                                 f"this run may wait: retry after {at}") from None
            return max(0.0, err.wait_s)
        wanted = err.wait_s if err.wait_s > 0 else self.base_wait_s * (2**attempt)
        return min(self.max_wait_s, wanted)


def read(fn: Callable[[], T], policy: Policy = Policy(), sleep: Callable[[float], None] = time.sleep) -> T:
    """Call ``fn`` until it succeeds or a non-transient error; retry transient ones."""
    for attempt in range(policy.attempts):
        try:
            return fn()
        except TransientError as err:
            if attempt + 1 == policy.attempts:
                raise
            sleep(policy.wait(err, attempt))
    raise AssertionError("unreachable")


def write(
    fn: Callable[[], T],
    recheck: Optional[Callable[[], Optional[T]]],
    policy: Policy = Policy(),
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Perform a write once; after a transient failure, look before writing again.

    ``recheck`` returns what the write would have produced when it is already there (found
    by marker), else None. Without ``recheck`` the write is idempotent and simply repeated.
    """
    for attempt in range(policy.attempts):
        try:
            return fn()
        except TransientError as err:
            if attempt + 1 == policy.attempts:
                raise
            sleep(policy.wait(err, attempt))
            if recheck is not None:
                existing = read(recheck, policy, sleep)
                if existing is not None:
                    return existing
    raise AssertionError("unreachable")
