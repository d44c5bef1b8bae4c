"""The bot's own retry policy (PyGithub's built-in retries are turned off).

PyGithub's default retries POSTs on 5xx and 403 and sleeps 60 s on a secondary rate limit:
a review that GitHub created before answering 502 would be created twice, and tests would
wait minutes. Here, reads are simply retried. A write is never blindly repeated: after a
transient failure the caller's ``recheck`` lists what exists (by hidden marker) and the write
is repeated only when it did not happen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


class TransientError(Exception):
    """A failure worth retrying: 5xx, a secondary rate limit, a dropped connection."""

    def __init__(self, message: str, wait_s: float = 1.0):
        super().__init__(message)
        self.wait_s = wait_s


@dataclass(frozen=True)
class Policy:
    attempts: int = 4
    max_wait_s: float = 30.0  # never sleep longer than this on one retry-after
    base_wait_s: float = 0.5

    def wait(self, err: TransientError, attempt: int) -> float:
        """What the server asked for (``retry-after``), else exponential backoff; capped."""
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
