"""The one way GraphMend writes a user's file or an artifact: atomically.

A rewrite is written to a temporary file in the same folder, flushed to disk, and moved over
the original with ``os.replace``; a run killed at any moment (SIGKILL, Ctrl-C) leaves either
the old file or the new one, never a truncated one. The file keeps its permission bits (an
executable script stays executable); a new file gets the mode ``open()`` would give it.
A path that is a symlink is written through: the link stays and its target is replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["write_text", "write_bytes"]


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_bytes(path: Path | str, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` atomically, keeping its mode."""
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _umask_mode()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".graphmend-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, target)
    except BaseException:  # Ctrl-C included: the original is untouched, the partial copy goes
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(target.parent)


BOM = b"\xef\xbb\xbf"


def write_text(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    """``write_bytes`` of ``text`` encoded (newlines as written: no translation). A UTF-8 file
    that begins with a byte-order mark keeps it (``sources.read_source`` gives the text without)."""
    data = text.encode(encoding)
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8") and not data.startswith(BOM) and _has_bom(path):
        data = BOM + data
    write_bytes(path, data)


def _has_bom(path: Path | str) -> bool:
    try:
        with open(os.path.realpath(path), "rb") as fh:
            return fh.read(len(BOM)) == BOM
    except OSError:
        return False


def _fsync_folder(folder: Path) -> None:
    # The rename itself is durable only once the folder is synced (not possible everywhere).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
