"""Safe reading of the user's files, and the one parser of suppression comments.

Everything GraphMend reads from a repository goes through ``read_source``: it never follows a
symlink out of the repository, and turns every way a file can be unusable (unreadable, binary,
not UTF-8, too big or too deeply nested to parse safely: ``parse_bounds``) into a ``SourceError`` whose ``str()`` is one line naming the file and the cause, so
that callers can report it and go on with the other files.
"""

from __future__ import annotations

import io
import keyword
import os
import re
import tokenize
from pathlib import Path

__all__ = ["SourceError", "read_source", "suppressed", "iter_python_files", "parse_bounds", "split_lines", "line_text",
           "line_ending", "with_line_ending"]

# libcst's native parser recurses on the C stack: a 100,000-deep unary expression kills the
# process with a segfault, and its time grows quadratically with a chain of binary operators
# or attributes in one statement (3,000 terms: 12 s; 30,000: hours). Python's own compiler
# refuses nesting past 200. These bounds are far beyond real code; a file past them is that
# file's error.
MAX_SOURCE_CHARS = 5_000_000
MAX_NESTING = 100  # brackets and runs of unary operators
MAX_CHAIN = 1000  # binary operators and attribute dots in one statement
_OPEN, _CLOSE = "([{", ")]}"
_UNARY = {"-", "+", "~", "not", "await", "*", "**"}
_OPERAND_END = {tokenize.NUMBER, tokenize.STRING}
_NOT_BINARY = {"=", ",", ":", ";", "->", "...", "@"} | set(_OPEN) | set(_CLOSE)


# Python's tokenizer ends a line only at "\r\n", "\r" or "\n"; str.splitlines also breaks at
# \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029, which may stand inside a string or a comment.
# Every numbered line of a source file (check's line numbers, an edit's range, a suggestion's)
# comes from this one splitter, so they all agree with Python's.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """``text`` split into lines as Python numbers them, each keeping its line ending."""
    return _LINE.findall(text)


def line_text(line: str) -> str:
    """One line of ``split_lines`` without its line ending."""
    return line.rstrip("\r\n")


def line_ending(text: str) -> str:
    """The line ending all of ``text``'s lines end with (``"\\n"`` when they differ, or none has one)."""
    ends = {line[len(line_text(line)):] for line in split_lines(text)} - {""}
    return ends.pop() if len(ends) == 1 else "\n"


def with_line_ending(text: str, newline: str) -> str:
    """``text`` with each line that ends in a bare ``"\\n"`` ending in ``newline`` instead (the
    same program: Python reads every line ending alike, in string literals too)."""
    if newline == "\n":
        return text
    return "".join(line[:-1] + newline if line.endswith("\n") and not line.endswith("\r\n") else line
                   for line in split_lines(text))


class SourceError(Exception):
    """A file that cannot be used as source. ``str()`` is ``"<path>: <cause>"``."""

    def __init__(self, path: str, cause: str):
        self.path, self.cause = path, cause
        super().__init__(f"{path}: {cause}")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def read_source(root: Path | str, rel: str) -> str:
    """The text of the repo-relative file ``rel``, or ``SourceError`` with a one-line reason."""
    root = Path(root).resolve()
    rel = rel.replace("\\", "/")
    path = root / rel
    # Resolve without opening: a symlink (of the file or of a folder on the way) that leaves the
    # repository is refused before anything is read through it.
    real = Path(os.path.realpath(path))
    if not _inside(real, root):
        raise SourceError(rel, f"symlink leaves the repository (points to {real}); not followed")
    if not os.path.lexists(path):
        raise SourceError(rel, "no such file")
    if not real.exists():
        raise SourceError(rel, "broken symlink")
    if real.is_dir():
        raise SourceError(rel, "is a directory, not a file")
    try:
        data = real.read_bytes()
    except OSError as exc:
        raise SourceError(rel, f"unreadable ({exc.strerror or exc})") from None
    if b"\x00" in data:
        raise SourceError(rel, "binary file (contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(rel, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})") from None
    text = text[1:] if text.startswith("\ufeff") else text
    if rel.endswith((".py", ".pyi")):
        problem = parse_bounds(text)
        if problem:
            raise SourceError(rel, f"not parsed: {problem}")
    return text


def parse_bounds(text: str) -> str:
    """Why parsing ``text`` could crash or hang the parser, or "" when it is within bounds.

    Tokenizing is iterative and linear, so it is safe on any input; a file that does not even
    tokenize is left to the parser, which reports the syntax error.
    """
    if len(text) > MAX_SOURCE_CHARS:
        return f"{len(text)} characters (at most {MAX_SOURCE_CHARS})"
    depth = unary = chain = 0
    operand = False  # whether the previous token ends an operand (so an operator is binary)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, s = tok.type, tok.string
            if kind == tokenize.NEWLINE:
                chain, unary, operand = 0, 0, False
                continue
            if kind in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            is_op = kind == tokenize.OP or (kind == tokenize.NAME and keyword.iskeyword(s))
            if is_op and s in _OPEN:
                depth += 1
            elif is_op and s in _CLOSE:
                depth = max(0, depth - 1)
            if is_op and not operand and s in _UNARY:
                unary += 1
            elif is_op and operand and s not in _NOT_BINARY and s not in ("None", "True", "False"):
                chain += 1
                unary = 0
            else:
                unary = 0
            if depth > MAX_NESTING or unary > MAX_NESTING:
                return f"nested more than {MAX_NESTING} deep at line {tok.start[0]}"
            if chain > MAX_CHAIN:
                return f"a statement with more than {MAX_CHAIN} operators at line {tok.start[0]}"
            operand = (kind in _OPERAND_END or (kind == tokenize.NAME and (not keyword.iskeyword(s) or s in ("None", "True", "False")))
                       or (is_op and s in _CLOSE))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return ""


# `# graphmend: ignore` or `# graphmend: ignore[GM101, GM2]` (codes or code prefixes)
_SUPPRESS_RE = re.compile(r"#\s*graphmend:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)


def suppressed(line_text: str, rule: str | None) -> bool:
    """Whether a suppression comment on ``line_text`` silences ``rule`` at that line.

    A bare ``# graphmend: ignore`` silences everything on the line; a bracketed list silences
    the codes it names, a prefix (``GM1``) naming a whole range. A finding without a rule is
    silenced only by the bare form.
    """
    for match in _SUPPRESS_RE.finditer(line_text):
        codes = match.group(1)
        if codes is None:
            return True
        if rule is None:
            continue
        for code in (c.strip().upper() for c in codes.split(",")):
            if code and rule.upper().startswith(code):
                return True
    return False


_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def iter_python_files(root: Path | str, start: str) -> list[str]:
    """Repo-relative ``*.py`` paths under ``start`` (a repo-relative folder or file), sorted.

    Hidden folders (``.git``, ``.venv`` ...) and caches are skipped; symlinked folders are not
    descended (a symlinked *file* is listed, so that ``read_source`` can report where it points).
    """
    root = Path(root).resolve()
    start = start.replace("\\", "/").strip("/") or "."
    base = root / start
    if base.is_file() or (base.is_symlink() and not base.is_dir()):
        return [start] if start.endswith(".py") else []
    found: list[str] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in files:
            if name.endswith(".py"):
                found.append(Path(folder, name).relative_to(root).as_posix())
    return sorted(found)
