"""Where a rewritten file finds the runtime (``_runtime.py``): one stamped copy per package.

A GM2xx/GM3xx fix needs the runtime's functions at run time. A file inside a Python package
(its folder and every folder up to the top package have ``__init__.py``) imports them from ONE
copy of the runtime written beside the package it serves, ``<top package>/_graphmend_runtime.py``
(or the module ``fix.runtime`` in ``graphmend.yml`` names), with two lines at its end::

    from ..._graphmend_runtime import _graphmend_install  # noqa: E402
    _graphmend_install(globals())

At the end, so no line of the file moves (the locations that logging and ``warnings`` report and
every later fix's line numbers stay put); the functions are called only after the module is
imported. The copy carries a stamp: GraphMend's version and the SHA-256 of the text below the
stamp. A newer GraphMend replaces a copy whose stamp matches its content (it is ours and
unedited); a copy edited by hand, or one without a stamp, is never overwritten: the fixes that
need it are declined and say why. A script outside any package keeps the runtime inline at its
end, without comments (:data:`INLINE`).

The fix carries the copy as a :class:`graphmend.model.FileWrite` (created / updated / unchanged
against the tree the rule read); ``graphmend fix`` writes it atomically (:func:`write_files`).
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from graphmend.model import Edit, FileWrite
from graphmend.sources import split_lines

FILE_NAME = "_graphmend_runtime.py"
INSTALL = "_graphmend_install"
SOURCE = Path(__file__).with_name("_runtime.py").read_text(encoding="utf-8")
STAMP_LINE = re.compile(r"# graphmend-runtime: version (\S+) sha256 ([0-9a-f]{64})\n")


def _version() -> str:
    from graphmend import __version__

    return __version__


def _strip_comments(text: str) -> str:
    """``text`` without comment-only lines and trailing comments (the compact inline form)."""
    out = []
    drop = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            drop.add((tok.start[0], tok.start[1]))
    for number, line in enumerate(split_lines(text), start=1):
        cut = [col for (row, col) in drop if row == number]
        if cut:
            kept = line[: cut[0]].rstrip()
            if not kept:
                continue
            line = kept + "\n"
        out.append(line)
    return re.sub(r"\n{4,}", "\n\n\n", "".join(out))


INLINE = (
    "\n\n# graphmend runtime (graphmend fix): records print/logging/warnings under torch.compile and replays them.\n"
    + _strip_comments(SOURCE).lstrip("\n")
    + f"\n\n{INSTALL}(globals())\n"
)


def body() -> str:
    return SOURCE


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stamped() -> str:
    """The text of a package's runtime copy: the stamp, then :func:`body`."""
    text = body()
    return (
        f"# Written by `graphmend fix` (GraphMend {_version()}): the runtime of its rewrites in this package.\n"
        "# Do not edit: `graphmend fix` replaces this file only while its content matches the digest below.\n"
        f"# graphmend-runtime: version {_version()} sha256 {digest(text)}\n"
        + text
    )


def is_ours(text: str) -> bool:
    """Whether ``text`` is a runtime copy GraphMend wrote and nobody edited since."""
    lines = split_lines(text)
    if len(lines) < 3:
        return False
    match = STAMP_LINE.fullmatch(lines[2])
    return bool(match) and digest("".join(lines[3:])) == match.group(2)


@dataclass(frozen=True)
class RuntimeSpot:
    """Where a file's runtime copy is: ``path`` (relative to the root), the module the file
    imports it from (``module``, relative when in the same package) and its current text."""

    path: str
    module: str
    existing: Optional[str] = None  # None: not there
    problem: str = ""  # why no copy can be used (a symlink, a folder): the fixes decline


def locate(root: Path, rel: str, configured: Optional[str] = None) -> Optional[RuntimeSpot]:
    """The runtime copy ``rel`` (a file of ``root``) imports, or None when it is not in a
    package (a script: the runtime goes inline)."""
    folder = Path(rel).parent
    if not (root / folder / "__init__.py").is_file():
        return None
    top = folder
    while top.parent != top and (root / top.parent / "__init__.py").is_file():
        top = top.parent
    if not top.parts:
        # The repository's root is the package: its import name is the checkout's folder name,
        # which nothing here knows, and its modules are usually imported from the root as top-level
        # modules, where a relative import fails: the runtime goes inline, as for a script.
        return None
    path = Path(configured) if configured else top / FILE_NAME
    here, there = folder.parts, path.parent.parts
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    if common >= len(top.parts):  # the same package: a relative import
        module = "." * (len(here) - common + 1) + ".".join([*there[common:], path.stem])
    else:
        if not there or not (root / path.parent / "__init__.py").is_file():
            return RuntimeSpot(path.as_posix(), "", None, f"fix.runtime {path.as_posix()} is not inside a package "
                               "(its folder has no __init__.py), so the files of other packages cannot import it")
        start = path.parent
        while start.parent != start and (root / start.parent / "__init__.py").is_file():
            start = start.parent
        module = ".".join([*there[len(start.parts) - 1:], path.stem])
    target = root / path
    if target.is_symlink() or (target.exists() and not target.is_file()):
        return RuntimeSpot(path.as_posix(), module, None, f"{path.as_posix()} is a symlink or not a regular file")
    existing = target.read_text(encoding="utf-8", errors="replace") if target.exists() else None
    return RuntimeSpot(path.as_posix(), module, existing)


def import_lines(spot: RuntimeSpot) -> str:
    return f"\n\nfrom {spot.module} import {INSTALL}  # noqa: E402\n{INSTALL}(globals())\n"


def needed(spot: RuntimeSpot) -> Union[FileWrite, str]:
    """The copy a fix needs, with what writing it does; or why it cannot (a hand-edited copy)."""
    if spot.problem:
        return spot.problem
    text = stamped()
    purpose = f"graphmend runtime {_version()} (sha256 {digest(body())[:12]}), imported by the rewritten files"
    if spot.existing is None:
        return FileWrite(spot.path, text, "create", "", purpose)
    if spot.existing == text:
        return FileWrite(spot.path, text, "unchanged", spot.existing, purpose)
    if is_ours(spot.existing):
        return FileWrite(spot.path, text, "update", spot.existing, purpose)
    return (f"{spot.path} exists but is not an unedited graphmend runtime (its stamp does not match its content), "
            "so it is never overwritten; restore it, or delete it and run graphmend fix again")


def tail_edit(path: str, lines: Sequence[str], text: str) -> Edit:
    """The edit appending ``text`` after the last of ``lines`` (no line moves)."""
    n = len(lines)
    return Edit(file=path, start_line=n + 1, end_line=n, new_text=text.lstrip("\n") if n == 0 else text, old_text="")


def write_files(root: Path, files: Sequence[FileWrite]) -> list[str]:
    """Write the runtime copies a set of fixes needs under ``root`` atomically; the paths written.

    A file is written only when it is still what the fix was computed against (absent for
    ``create``, ``old_text`` for ``update``); otherwise ``ValueError`` says which changed."""
    from graphmend import fsutil

    written = []
    for f in files:
        target = root / f.path
        if target.is_symlink():
            raise ValueError(f"{f.path}: a symlink; the runtime is not written through it")
        current = target.read_text(encoding="utf-8", errors="replace") if target.is_file() else None
        if current == f.text:
            continue
        if f.action == "create" and current is not None or f.action in ("update", "unchanged") and current != f.old_text:
            raise ValueError(f"{f.path} changed since the fixes were computed; run graphmend fix again")
        target.parent.mkdir(parents=True, exist_ok=True)
        fsutil.write_text(target, f.text)
        written.append(f.path)
    return written
