"""Hidden markers that let the bot recognise its own comments on a later run.

GitHub renders HTML comments as nothing, so a marker costs the reader nothing and lets a
re-run find what it posted before: the review of a head SHA, the inline comment of a
finding (by fingerprint) and the one sticky comment. Markers are built only from values
the bot checked itself (hex fingerprints, hex SHAs), never from untrusted text, and untrusted
text is escaped before rendering (``render.escape``), so a message cannot forge a marker.
"""

from __future__ import annotations

import re
from typing import Optional

PREFIX = "graphmend"
_HEX = re.compile(r"^[0-9a-f]{1,64}$")

STICKY = f"<!-- {PREFIX}:sticky -->"


def _check_hex(value: str, what: str) -> str:
    if not _HEX.match(value):
        raise ValueError(f"{what} must be lowercase hex, got {value!r}")
    return value


def finding_marker(fingerprint: str) -> str:
    """The marker of the inline comment about one finding."""
    return f"<!-- {PREFIX}:finding {_check_hex(fingerprint, 'fingerprint')} -->"


def review_marker(head_sha: str) -> str:
    """The marker of the review posted for one head commit."""
    return f"<!-- {PREFIX}:review {_check_hex(head_sha, 'head SHA')} -->"


def digest_marker(digest: str) -> str:
    """Records a digest of the sticky comment's content, to update it only on change."""
    return f"<!-- {PREFIX}:digest {_check_hex(digest, 'digest')} -->"


def fixes_marker(digest: str) -> str:
    """Records, in a head's review, the digest of the fixes it offered (``/graphmend apply``
    commits only those)."""
    return f"<!-- {PREFIX}:fixes {_check_hex(digest, 'digest')} -->"


_FIXES_RE = re.compile(r"<!-- graphmend:fixes ([0-9a-f]{1,64}) -->")
_FINDING_RE = re.compile(r"<!-- graphmend:finding ([0-9a-f]{1,64}) -->")
_REVIEW_RE = re.compile(r"<!-- graphmend:review ([0-9a-f]{1,64}) -->")
_DIGEST_RE = re.compile(r"<!-- graphmend:digest ([0-9a-f]{1,64}) -->")


def _first(regex: re.Pattern[str], body: Optional[str]) -> Optional[str]:
    m = regex.search(body or "")
    return m.group(1) if m else None


def find_finding(body: Optional[str]) -> Optional[str]:
    """The fingerprint in an inline comment of ours, or None."""
    return _first(_FINDING_RE, body)


def find_review(body: Optional[str]) -> Optional[str]:
    """The head SHA in a review body of ours, or None."""
    return _first(_REVIEW_RE, body)


def find_digest(body: Optional[str]) -> Optional[str]:
    return _first(_DIGEST_RE, body)


def find_fixes(body: Optional[str]) -> Optional[str]:
    return _first(_FIXES_RE, body)


def is_sticky(body: Optional[str]) -> bool:
    return STICKY in (body or "")
