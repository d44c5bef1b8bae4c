"""The one door for what a worker hands back: files in its scratch folder, and its output streams.

A worker runs a pull request's code, so everything it leaves is hostile until checked. Every
read of a scratch file goes through ``read_file``: the name is opened relative to the scratch
folder without following a symlink (``O_NOFOLLOW``) and without waiting for a writer
(``O_NONBLOCK``, so a FIFO cannot hang the parent), must be a regular file, and is read up to a
size cap. ``copy_file`` hands a file from one scratch folder to another the same way (the
destination is created fresh, never written through a name the worker planted).
``read_response`` is ``response.json``: capped, JSON, and validated against
``graphmend/schemas/worker-response.schema.json``. ``source_file`` decides whether a source file
a worker names in a frame may be read at all.

A worker's stdout and stderr come through pipes into ``CappedStream``: the first and the last
``CAP`` bytes are kept and the rest is counted, so the parent's memory does not grow with what a
target prints. ``clean_text`` makes such bytes safe to show in a log (no control characters, no
line that a GitHub runner would read as a workflow command).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import site
import stat
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, Iterator, Optional

RESPONSE_MAX_BYTES = 64 * 1024 * 1024  # a detect result of a large model is a few MB
# A worker's result nests a handful of levels (sites, stacks, frames); much deeper would make the
# parent's own recursive code (schema checks, writing review.json) fail later, away from the worker.
RESPONSE_MAX_DEPTH = 64
# And a few hundred thousand values. Parsed, each value costs the parent 30 to 60 times its bytes
# (20 million empty objects in 60 MB took 3 GB and over a minute): the byte cap alone is not enough.
RESPONSE_MAX_VALUES = 1_000_000
STREAM_KEEP_BYTES = 64 * 1024  # of each stream: this much of its head, and as much of its tail
COPY_MAX_BYTES = 64 * 1024 * 1024 * 1024  # weights handed between verify's arms (a large model's state)
_CHUNK = 1024 * 1024


class ChannelError(Exception):
    """A scratch file that is missing, not a regular file, too large or malformed; ``str()`` says which."""


def _open(folder: Path, name: str, flags: int) -> int:
    if not name or "/" in name or name in (".", ".."):
        raise ChannelError(f"{name!r} is not a plain file name")
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _open_regular(folder: Path, name: str, max_bytes: int) -> int:
    """A read descriptor of ``folder/name`` when it is a regular file (not a symlink) of at most ``max_bytes``."""
    if not name or "/" in name or name in (".", ".."):
        raise ChannelError(f"{name!r} is not a plain file name")
    try:
        # Looked at first without opening it: opening a device node can itself have effects.
        if not stat.S_ISREG(os.stat(folder / name, follow_symlinks=False).st_mode):
            raise ChannelError(f"{name} is not a regular file")
        # O_NONBLOCK: a FIFO swapped in meanwhile opens at once (and is refused below) instead of waiting.
        fd = _open(folder, name, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ChannelError(f"{name} is missing") from None
    except OSError as exc:
        # ELOOP: the name became a symlink; ENXIO: a socket
        raise ChannelError(f"{name} is not a regular file ({exc.strerror})") from None
    st = os.fstat(fd)
    problem = (f"{name} is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"{name} is {st.st_size} bytes, over the {max_bytes} byte limit" if st.st_size > max_bytes else None)
    if problem:
        os.close(fd)
        raise ChannelError(problem)
    return fd


def _chunks(fd: int, name: str, max_bytes: int) -> Iterator[bytes]:
    total = 0
    while True:  # the file may still grow (a process writing it): never read past the cap
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            return
        total += len(chunk)
        if total > max_bytes:
            raise ChannelError(f"{name} is over the {max_bytes} byte limit")
        yield chunk


def read_file(folder: Path, name: str, max_bytes: int) -> bytes:
    """The bytes of ``folder/name``: a regular file (never a symlink, FIFO, socket or device) of at most ``max_bytes``."""
    fd = _open_regular(folder, name, max_bytes)
    try:
        return b"".join(_chunks(fd, name, max_bytes))
    finally:
        os.close(fd)


def open_file(folder: Path, name: str, max_bytes: int = COPY_MAX_BYTES) -> IO[bytes]:
    """``folder/name`` opened for reading as a binary file object, checked as ``read_file`` checks
    it (never a symlink, FIFO, socket or device; at most ``max_bytes`` when opened). For files too
    large to hold twice (tensors a worker saved: ``torch.load(open_file(...), weights_only=True)``).
    Raises ``ChannelError``; ``str()`` ends with "is missing" when there is none."""
    fd = _open_regular(folder, name, max_bytes)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_stored_archive(f: IO[bytes], name: str) -> None:
    """Refuse a zip archive (``torch.save``'s format, read by ``torch.load``) that unpacks to more
    bytes than it holds: a compressed member (256 KB of deflated zeros unpack to 256 MB in the
    parent), a member whose two sizes disagree, or members whose sizes add up to more than the
    file (the same bytes named many times). ``torch.save`` stores every member uncompressed, one
    after the other. Leaves ``f`` at its start; raises ``ChannelError``."""
    import zipfile

    size = os.fstat(f.fileno()).st_size
    try:
        with zipfile.ZipFile(f) as archive:  # a file object passed in stays open
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise ChannelError(f"{name}: not a tensor file (not a zip archive: {' '.join(str(exc).split())[:200]})") from None
    total = 0
    for m in members:
        if m.compress_type != zipfile.ZIP_STORED or m.compress_size != m.file_size:
            raise ChannelError(f"{name}: member {clean_text(m.filename[:100])!r} is compressed, which torch.save never does")
        total += m.file_size
    if total > size:
        raise ChannelError(f"{name}: its members add up to {total} bytes, more than the {size} bytes of the file")
    f.seek(0)


def copy_file(src_folder: Path, src_name: str, dst_folder: Path, dst_name: str, max_bytes: int = COPY_MAX_BYTES) -> bool:
    """Copy a worker's file into another scratch folder, chunk by chunk; False when there is none.

    Raises ``ChannelError`` when the source is anything but a regular file under the cap (then
    nothing is left at the destination)."""
    try:
        fd = _open_regular(src_folder, src_name, max_bytes)
    except ChannelError as exc:
        if str(exc).endswith("is missing"):
            return False
        raise
    try:
        try:
            os.unlink(dst_folder / dst_name)  # whatever the name was (a planted symlink too), it is replaced
        except FileNotFoundError:
            pass
        out = _open(dst_folder, dst_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(out, "wb") as sink:
                for chunk in _chunks(fd, src_name, max_bytes):
                    sink.write(chunk)
        except BaseException:
            os.unlink(dst_folder / dst_name)
            raise
        return True
    finally:
        os.close(fd)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (without recursing: it may nest thousands deep)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path) -> bool:
    """Remove a folder a worker wrote into, however deep, never following a symlink; True when it is gone.

    ``shutil.rmtree`` recurses (a worker's folder a few thousand levels deep makes it raise
    ``RecursionError``, which ``ignore_errors`` does not catch) and ``os.walk`` needs whole paths
    (longer than ``PATH_MAX`` there). This walks with one open folder at a time, going back up
    through ``..`` only while that is the folder it came from. Never raises."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.unlink(path)  # a file, or a symlink in the folder's place: the name goes, not its target
            return True
        except OSError:
            return False
    trail: list[tuple[tuple[int, int], str, set]] = []  # per folder above: its identity, our name in it, names it keeps
    kept: set = set()  # names in the current folder that cannot be removed
    try:
        while True:
            sub = None
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.name in kept:
                            continue
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                sub = entry.name
                                break
                            os.unlink(entry.name, dir_fd=fd)
                        except OSError:
                            kept.add(entry.name)
            except OSError:
                pass
            if sub is not None:
                try:
                    child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    kept.add(sub)
                    continue
                st = os.fstat(fd)
                trail.append(((st.st_dev, st.st_ino), sub, kept))
                os.close(fd)
                fd, kept = child, set()
                continue
            if not trail:
                break
            (identity, name, kept) = trail.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != identity:
                return False  # the folder was moved meanwhile: stop rather than work somewhere else
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                kept.add(name)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def work_folder(prefix: str = "graphmend-work-") -> Iterator[Path]:
    """A private temporary folder to hold workers' scratch folders, removed with ``remove_tree``
    (``tempfile.TemporaryDirectory`` uses ``shutil.rmtree``, which a worker's deep folder breaks)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        remove_tree(path)


def read_json(folder: Path, name: str, max_bytes: int, max_values: int = RESPONSE_MAX_VALUES,
              max_depth: int = RESPONSE_MAX_DEPTH) -> Any:
    """The JSON value in ``folder/name`` (a worker's or an artifact's): read as ``read_file``
    reads (never a symlink, FIFO or device; at most ``max_bytes``), refused before parsing when
    it holds more than ``max_values`` values, and after when it nests deeper than ``max_depth``
    (or too deep to parse at all); no ``NaN``/``Infinity``. ``ChannelError`` otherwise."""
    raw = read_file(folder, name, max_bytes)
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")  # at least the values it holds (strings may add)
    if values > max_values:
        raise ChannelError(f"{name} holds too many values ({values} separators, over {max_values})")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ChannelError(f"{name} is not JSON ({exc})") from None
    except RecursionError:
        raise ChannelError(f"{name} is not JSON (nested too deeply to parse)") from None
    if _depth(data) > max_depth:
        raise ChannelError(f"{name} is not JSON the parent uses (nested deeper than {max_depth} levels)")
    return data


def read_response(scratch: Path, max_bytes: int = RESPONSE_MAX_BYTES) -> dict[str, Any]:
    """The worker's ``response.json``, capped, parsed and schema-checked (``ChannelError`` otherwise)."""
    from graphmend import schemas

    response = read_json(scratch, "response.json", max_bytes)
    try:
        schemas.validate("worker-response", response)
    except schemas.SchemaValidationError as exc:
        raise ChannelError(f"response.json breaks the worker protocol: {clean_text(str(exc))[:300]}") from None
    return response


class CappedStream:
    """A byte stream kept as its head and tail; the middle is counted, not stored."""

    def __init__(self, keep: int = STREAM_KEEP_BYTES):
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """Head and tail as text, with a line saying how much was cut between them."""
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail).decode("utf-8", "replace")
        if self.cut:
            return f"{head}\n[... {self.cut} bytes of output cut ...]\n{tail}"
        return head + tail

    def tail_text(self, chars: int = 4000) -> str:
        """The last ``chars`` characters, after a line saying how much came before them."""
        text = self.text()
        if len(text) <= chars:
            return text
        return f"[... {self.total - len(text[-chars:].encode('utf-8', 'replace'))} bytes before this cut ...]\n{text[-chars:]}"

    def drain(self, stream: IO[bytes]) -> None:
        """Read ``stream`` to its end (in this thread), keeping what the cap allows."""
        while True:
            chunk = stream.read(_CHUNK) if not hasattr(stream, "read1") else stream.read1(_CHUNK)  # type: ignore[attr-defined]
            if not chunk:
                break
            self.feed(chunk)

    def drain_in_thread(self, stream: IO[bytes]) -> threading.Thread:
        def run() -> None:
            try:
                self.drain(stream)
            finally:
                stream.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")


def clean_text(text: str) -> str:
    """Worker text made safe for a log: control characters replaced, and no line that a GitHub
    runner reads as a workflow command (``report.github.neutralise``)."""
    from graphmend.report.github import neutralise

    return neutralise(_CONTROL.sub("\ufffd", text))


SOURCE_MAX_BYTES = 16 * 1024 * 1024


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@functools.lru_cache(maxsize=1)
def _site_dirs() -> tuple[Path, ...]:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    dirs.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)  # .pth-added site dirs
    return tuple(Path(d).resolve() for d in sorted(dirs) if d and os.path.isdir(d))


def source_file(claim: str, root: Path) -> Optional[str]:
    """Where the parent may read a source file a worker names in a frame, or None.

    A worker's frame paths are its claims. The parent reads one only when it resolves (symlinks
    followed) to a regular file of at most ``SOURCE_MAX_BYTES`` inside the repository ``root``,
    (never inside its ``.git``), or, for an absolute path outside the repository, inside this
    interpreter's site-packages (a library the break happened in). Anything else (``/dev/zero``, ``../../secret``, a symlink
    in the tree pointing out of it) is reported as named and never opened."""
    if not claim or claim.startswith("<") or "\0" in claim:
        return None
    path = Path(claim) if os.path.isabs(claim) else Path(root) / claim
    try:
        resolved = path.resolve(strict=True)
        root = Path(root).resolve()
        # Not the repository's own git folder: .git/config holds the credentials a checkout persisted.
        allowed = ((_within(resolved, root) and ".git" not in resolved.relative_to(root).parts)
                   or (os.path.isabs(claim) and any(_within(resolved, d) for d in _site_dirs())))
        if not allowed:
            return None
        st = os.stat(resolved)
    except (OSError, RuntimeError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > SOURCE_MAX_BYTES:
        return None
    return str(resolved)


REPO_PATHS_MAX = 50_000
REPO_PATH_MAX_CHARS = 1000
_PATH_CHAR_BAD = re.compile(r"[\x00-\x1f\x7f\\]")


def repo_paths(claims: Any, max_items: int = REPO_PATHS_MAX) -> Optional[tuple[str, ...]]:
    """A worker's list of repository files, or None when any item is not a plain repo-relative
    path (absolute, ``..``, ``.git``, control characters, over ``REPO_PATH_MAX_CHARS``) or the
    list is longer than ``max_items``. All or nothing: a record with one bad entry vouches for nothing."""
    if not isinstance(claims, list) or len(claims) > max_items:
        return None
    out = []
    for claim in claims:
        if not isinstance(claim, str) or not claim or len(claim) > REPO_PATH_MAX_CHARS or _PATH_CHAR_BAD.search(claim):
            return None
        parts = claim.split("/")
        if claim.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
            return None
        out.append(claim)
    return tuple(out)
