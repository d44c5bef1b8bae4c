"""``verify``: proof that a rewritten tree computes what the original computes.

Public API (torch is imported only when these run, never at import time):

- ``verify(config, target_names=None, *, base="HEAD", grad=False, runner=None, progress=None)``
  compares the tree at ``base`` with the working tree;
- ``verify_fixes(config, fixes, ...)`` verifies candidate fixes alone and together on copies of
  the working tree and withdraws those that fail;
- ``verify_edits(config, base_root, fixes, ...)``: the fix loop's check, the fixes together on a
  copy of ``base_root``, split in halves only when they fail together.

Both return a ``VerifyReport`` (``graphmend.verify.results``).
"""

from __future__ import annotations

from typing import Any

from graphmend.verify.results import FixVerdict, Mismatch, TargetVerification, VerifyReport

__all__ = ["FixVerdict", "Mismatch", "TargetVerification", "VerifyReport", "verify", "verify_edits", "verify_fixes"]


def verify(*args: Any, **kwargs: Any) -> VerifyReport:
    from graphmend.verify.parent import verify as run

    return run(*args, **kwargs)


def verify_fixes(*args: Any, **kwargs: Any) -> VerifyReport:
    from graphmend.verify.parent import verify_fixes as run

    return run(*args, **kwargs)


def verify_edits(*args: Any, **kwargs: Any) -> VerifyReport:
    from graphmend.verify.parent import verify_edits as run

    return run(*args, **kwargs)


verify.__doc__ = "Compare the tree at ``base`` with the working tree; see graphmend.verify.parent.verify."
verify_fixes.__doc__ = "Verify fixes alone and together; see graphmend.verify.parent.verify_fixes."
verify_edits.__doc__ = "Verify fixes together, bisecting on failure; see graphmend.verify.parent.verify_edits."
