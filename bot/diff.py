"""Which lines of a pull request can carry an inline review comment.

GitHub accepts a review comment only on a line that appears in one of the diff hunks of
the file (an added line or a context line on the RIGHT side), and a multi-line comment or
suggestion only on a range inside one hunk. Each file's ``patch`` from the "list pull request
files" endpoint is parsed with unidiff; a file without ``patch`` (binary, or too large for
GitHub to show) has nothing commentable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError


@dataclass(frozen=True)
class Hunk:
    """The RIGHT-side lines of one hunk: ``start..end`` and which of them were added."""

    start: int
    end: int
    lines: frozenset[int]  # every RIGHT-side line in the hunk (added and context)
    added: frozenset[int]


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str = "modified"
    hunks: tuple[Hunk, ...] = ()
    has_patch: bool = True

    def hunk_of(self, line: int) -> Optional[Hunk]:
        for hunk in self.hunks:
            if line in hunk.lines:
                return hunk
        return None

    def range_in_one_hunk(self, start: int, end: int) -> bool:
        """Whether lines ``start..end`` all lie in one hunk (what a suggestion needs)."""
        hunk = self.hunk_of(start)
        return hunk is not None and all(n in hunk.lines for n in range(start, end + 1))


@dataclass(frozen=True)
class PullDiff:
    files: tuple[FileDiff, ...] = ()

    def file(self, path: str) -> Optional[FileDiff]:
        for f in self.files:
            if f.path == path:
                return f
        return None


def parse_patch(path: str, patch: Optional[str], status: str = "modified") -> FileDiff:
    """One file's ``patch`` text (hunks only, no file headers) as commentable lines."""
    if not patch:
        return FileDiff(path=path, status=status, hunks=(), has_patch=False)
    # GitHub's patch omits the ---/+++ headers; unidiff needs them to parse a file.
    text = f"--- a/{path}\n+++ b/{path}\n{patch}"
    if not text.endswith("\n"):
        text += "\n"
    try:
        patch_set = PatchSet(text)
    except UnidiffParseError:
        return FileDiff(path=path, status=status, hunks=(), has_patch=False)
    hunks = []
    for patched in patch_set:
        for hunk in patched:
            right = [ln.target_line_no for ln in hunk if ln.target_line_no is not None]
            added = [ln.target_line_no for ln in hunk if ln.is_added]
            if right:
                hunks.append(Hunk(min(right), max(right), frozenset(right), frozenset(added)))
    return FileDiff(path=path, status=status, hunks=tuple(hunks), has_patch=True)


def parse_files(files: Iterable[tuple[str, str, Optional[str]]]) -> PullDiff:
    """``(filename, status, patch)`` rows from the files endpoint as a ``PullDiff``."""
    return PullDiff(tuple(parse_patch(name, patch, status) for name, status, patch in files))
