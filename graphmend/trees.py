"""Source trees to run "before" and "after": the tree at a git revision, or a copy to edit.

``verify`` and ``bench`` compare the tree at ``--base REV`` with the working tree. The tree at
REV is written out with ``git archive`` (no worktree bookkeeping left behind in the user's
repository, and nothing to clean up in ``.git`` if the run is killed), or, for a pull request's
commits, from their blobs exactly as committed (none of the tree's own ``.gitattributes`` applied); ``verify_fixes``
applies candidate fixes to private copies of the working tree, never to the tree itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

if TYPE_CHECKING:
    from graphmend.model import Edit, Fix


class TreeError(Exception):
    """A revision or a tree that cannot be materialised; ``str()`` is one line for the user."""


def _git(root: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise TreeError("git is not installed") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TreeError(message[-1] if message else f"git {' '.join(args)} failed")
    return done.stdout


def resolve_rev(root: Path, rev: str) -> str:
    """The commit id ``rev`` names in the repository at ``root``."""
    if rev.startswith("-"):
        raise TreeError(f"--base {rev!r}: not a revision")
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except TreeError:
        raise TreeError(f"--base {rev!r}: unknown revision in {root}") from None


def export_rev(root: Path, rev: str, dest: Path, refused: list[tuple[str, str]] | None = None, *,
               as_committed: bool = False) -> str:
    """Write the files of ``rev`` into ``dest`` (which must exist); returns the commit id.

    As ``git archive`` writes them (the tree's ``.gitattributes`` applied, as in a checkout), or
    with ``as_committed`` the blobs exactly as committed (``_tree_tar``: for a pull request's
    commit, whose ``.gitattributes`` the pull request wrote).

    A member that would land outside ``dest`` (a link to an absolute path or out through
    ``..``, a device file) is not written: it is that file's error, appended to ``refused`` as
    (path, reason), and the rest of the tree is written.
    """
    commit = resolve_rev(root, rev)
    # ``root`` may be a folder inside the repository (``-C examples``): take that folder of
    # the revision, so that both trees have the same layout.
    prefix = _git(root, "rev-parse", "--show-prefix").decode().strip().rstrip("/")
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip())
        treeish = f"{commit}:{prefix}" if prefix else commit
        data = _tree_tar(top, treeish) if as_committed else _git(top, "archive", "--format=tar", treeish)
    except TreeError:
        raise TreeError(f"--base {rev!r}: {prefix}/ does not exist at that revision") from None
    skipped = refused if refused is not None else []

    def refuse_escapes(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError as exc:
            kind = "link" if member.issym() or member.islnk() else "file"
            skipped.append((member.name, f"not extracted: a {kind} that leaves the tree ({type(exc).__name__})"))
            return None

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter=refuse_escapes)
    return commit


def _tree_tar(top: Path, treeish: str) -> bytes:
    """The files of ``treeish`` as a tar archive of their blobs exactly as committed.

    Not ``git archive``: it applies the archived tree's own ``.gitattributes``, which a pull
    request writes: ``export-ignore`` leaves files out, ``export-subst`` and ``ident`` rewrite
    them, ``eol`` and ``working-tree-encoding`` convert them, so the code analysed would not be
    the code merged. A submodule is an empty folder (as ``git archive`` writes it)."""
    entries = []
    for record in _git(top, "ls-tree", "-r", "-z", treeish).split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            mode, kind, sha = meta.decode("ascii").split(" ")
            entries.append((mode, kind, sha, path.decode("utf-8", "surrogateescape")))
    shas = sorted({sha for _, kind, sha, _ in entries if kind == "blob"})
    out = _git(top, "cat-file", "--batch", stdin="".join(f"{sha}\n" for sha in shas).encode("ascii"))
    blobs, at = {}, 0
    for sha in shas:
        end = out.index(b"\n", at)
        name, kind, size = out[at:end].decode("ascii").split(" ")
        if name != sha or kind != "blob":
            raise TreeError(f"git cat-file answered {name} {kind} for {sha}")
        blobs[sha] = out[end + 1 : end + 1 + int(size)]
        at = end + 1 + int(size) + 1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for mode, kind, sha, path in entries:
            info = tarfile.TarInfo(path)
            if kind != "blob":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif mode == "120000":
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                info.linkname = blobs[sha].decode("utf-8", "surrogateescape")
                tar.addfile(info)
            else:
                info.size, info.mode = len(blobs[sha]), 0o755 if mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(blobs[sha]))
    return buf.getvalue()


@contextlib.contextmanager
def tree_at(root: Path | str, rev: str, refused: list[tuple[str, str]] | None = None, *,
            as_committed: bool = False) -> Iterator[Path]:
    """A temporary folder holding the repository at ``rev``, removed on exit (``refused`` and
    ``as_committed``: as for ``export_rev``)."""
    root = Path(root).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="graphmend-base-"))
    try:
        dest = tmp / "tree"
        dest.mkdir()
        export_rev(root, rev, dest, refused, as_committed=as_committed)
        yield dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_SKIP = {".git", "__pycache__", ".venv", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def source_files(root: Path | str) -> list[str]:
    """The files that make up the tree at ``root``, relative to it, sorted.

    In a git repository: what git would see (tracked files and untracked ones that are not
    ignored, deleted ones left out), which skips virtual environments and build output;
    elsewhere every file; never byte code, caches or virtual environments."""
    root = Path(root).resolve()
    try:  # paths come back relative to ``root``, also when it is a folder inside the repository
        out = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        listed = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
    except TreeError:  # not a git repository (the tree ``git archive`` wrote)
        listed = [path.relative_to(root).as_posix() for path in root.rglob("*")]
    # Byte code is written by running the tree (a worker importing it), not part of its source.
    return sorted(f for f in set(listed)
                  if not _SKIP.intersection(f.split("/")) and not f.endswith((".pyc", ".pyo"))
                  and ((root / f).is_symlink() or (root / f).is_file()))


def copy_tree(root: Path | str, dest: Path) -> Path:
    """A copy of the working tree at ``root`` (uncommitted changes included) into ``dest``:
    the files ``source_files`` lists."""
    root = Path(root).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    for rel in source_files(root):
        src = root / rel
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(src.readlink())
        elif src.is_file():
            shutil.copy2(src, target)
    return dest


def apply_edits_to_tree(tree: Path, edits: Sequence[Edit]) -> None:
    """Apply whole-line edits (in original line numbers) to the files of ``tree``.

    Each file's edits go through ``engine.apply_edits`` together, so a stale edit raises
    ``EditConflict`` and nothing lands on the wrong lines.
    """
    from graphmend.fsutil import write_text
    from graphmend.sources import read_source
    from graphmend.transforms.engine import apply_edits

    by_file: dict[str, list[Edit]] = {}
    for e in edits:
        by_file.setdefault(e.file, []).append(e)
    for rel, file_edits in by_file.items():
        path = tree / rel
        if not path.resolve().is_relative_to(tree.resolve()):
            raise ValueError(f"{rel}: outside the repository")
        # As written (a CRLF file stays CRLF, a byte-order mark stays), as the edits were made.
        write_text(path, apply_edits(read_source(tree, rel), file_edits))


def apply_fixes_to_tree(tree: Path, fixes: Sequence[Fix]) -> None:
    """Write what ``fixes`` need into ``tree``: the whole files they carry (a runtime module
    beside the package, created or updated), then their edits (:func:`apply_edits_to_tree`)."""
    from graphmend.model import files_needed
    from graphmend.fsutil import write_text

    for f in files_needed(fixes):
        if f.action == "unchanged":
            continue
        path = tree / f.path
        if path.is_symlink() or not path.parent.resolve().is_relative_to(tree.resolve()):
            raise ValueError(f"{f.path}: outside the repository or a symbolic link")
        write_text(path, f.text)
    apply_edits_to_tree(tree, [e for fx in fixes for e in fx.edits])


@contextlib.contextmanager
def tree_copy(root: Path | str) -> Iterator[Path]:
    """A temporary copy of the working tree, removed on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="graphmend-copy-"))
    try:
        yield copy_tree(root, tmp / "tree")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tree_digest(root: Path | str) -> str:
    """A digest of the tree at ``root`` (the files ``source_files`` lists, links as links, never
    followed): two trees with the same digest hold the same bytes, as ``changed_files`` sees them."""
    root = Path(root)
    h = hashlib.sha256()
    for rel in source_files(root):
        path = root / rel
        data = (b"L" + str(path.readlink()).encode("utf-8", "surrogateescape")) if path.is_symlink() else b"F" + path.read_bytes()
        for part in (rel.encode("utf-8", "surrogateescape"), data):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
    return h.hexdigest()


def changed_files(before: Path | str, after: Path | str) -> list[str]:
    """The repo-relative files that differ between two trees (added, removed or edited), sorted.

    An empty list means the trees hold the same bytes: there is no source change to verify or
    to benchmark.
    """
    before, after = Path(before), Path(after)
    a, b = set(source_files(before)), set(source_files(after))
    changed = a ^ b
    for rel in a & b:
        pa, pb = before / rel, after / rel  # links are compared as links, never followed
        if pa.is_symlink() or pb.is_symlink():
            if not (pa.is_symlink() and pb.is_symlink() and pa.readlink() == pb.readlink()):
                changed.add(rel)
        elif pa.stat().st_size != pb.stat().st_size or pa.read_bytes() != pb.read_bytes():
            changed.add(rel)
    return sorted(changed)
