"""Workflow commands and the runner's files: ``$GITHUB_OUTPUT``, ``$GITHUB_STEP_SUMMARY``,
``::group::`` and annotations. Pure formatting plus appends to the files the runner gave us.

The escaping follows the runner's rules (actions/toolkit ``command.ts``): in a message ``%``,
``\\r`` and ``\\n`` are percent-encoded; in a property (``file=``, ``title=``) also ``:`` and ``,``.
Text from the analysed repository (file names, break reasons) is untrusted, so it always goes
through these functions: an unescaped newline would let it start its own workflow command.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
from pathlib import Path
from typing import Iterator, Optional, TextIO

# GitHub refuses a step summary over 1 MiB for the whole step; we keep well below it.
SUMMARY_LIMIT = 1024 * 1024 - 16 * 1024
TRUNCATED_NOTE = "\n\n_… summary truncated: the full report is in the job log and the uploaded files._\n"
# The runner shows only the first 10 annotations of each kind per step; more is noise.
MAX_ANNOTATIONS = 10


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str = "", stream: Optional[TextIO] = None, **props: object) -> str:
    """Format (and print) one workflow command, e.g. ``::warning file=a.py,line=3::text``."""
    parts = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None and v != "")
    line = f"::{name}{' ' + parts if parts else ''}::{escape_data(message)}"
    print(line, file=stream or sys.stdout, flush=True)
    return line


@contextlib.contextmanager
def group(title: str) -> Iterator[None]:
    print(f"::group::{escape_data(title)}", flush=True)
    try:
        yield
    finally:
        print("::endgroup::", flush=True)


def write_outputs(path: Optional[Path], outputs: dict[str, str]) -> None:
    """Append outputs in the runner's multi-line form (``name<<DELIM``), safe for any value."""
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as f:
        for name, value in outputs.items():
            value = "" if value is None else str(value)
            delim = f"ghadelimiter_{secrets.token_hex(16)}"
            while delim in value:  # practically never; but a value must not be able to end the block
                delim = f"ghadelimiter_{secrets.token_hex(16)}"
            f.write(f"{name}<<{delim}\n{value}\n{delim}\n")


def read_outputs(path: Path) -> dict[str, str]:
    """Parse a ``$GITHUB_OUTPUT`` file the way the runner does (both ``k=v`` and ``k<<D`` forms)."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)  # ValueError = malformed file, as the runner would fail
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def append_summary(path: Optional[Path], markdown: str) -> int:
    """Append to the step summary, keeping the step's total under the 1 MiB limit.

    Returns the number of bytes written. When the text does not fit it is cut at a line
    boundary and a note says so; the cut is made on the encoded size, since the limit is bytes.
    """
    if path is None or not markdown:
        return 0
    used = path.stat().st_size if path.exists() else 0
    room = SUMMARY_LIMIT - used
    data = markdown if markdown.endswith("\n") else markdown + "\n"
    encoded = data.encode("utf-8")
    if len(encoded) > room:
        note = TRUNCATED_NOTE.encode("utf-8")
        keep = max(0, room - len(note))
        cut = encoded[:keep]
        cut = cut[: cut.rfind(b"\n") + 1] if b"\n" in cut else b""
        encoded = cut + (note if room >= len(note) else b"")
    with open(path, "ab") as f:
        f.write(encoded)
    return len(encoded)
