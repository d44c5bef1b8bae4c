"""The accepted-breaks file (``gate.baseline``, default ``graphmend-baseline.json``).

A team adopting GraphMend on an existing codebase accepts the breaks it has today, so that the
merge gate fails only on breaks a pull request adds. ``graphmend baseline`` writes that file;
the gate (``bot.gate.baseline_fingerprints``) reads every ``"fingerprint"`` in it. The format:

    {
      "version": 1,
      "accepted": [
        {"fingerprint": "0f3c...", "code": "GB0170", "file": "pkg/model.py", "line": 11,
         "target": "net", "reason": "legacy code, tracked in #12", "accepted_in": "<commit sha>"}
      ]
    }

Entries are sorted by (file, fingerprint) and written with sorted keys and a final newline, so
the same breaks always give the same bytes and a diff of the file shows only breaks accepted or
dropped. An entry records where it was accepted (the commit, the file and line at that time)
and is never rewritten afterwards: an unrelated edit that moves a break does not touch the file.
Entries whose break is gone are dropped, except when a target could not run (its breaks were
not seen, which is not the same as fixed). The older ``{"fingerprints": [...]}`` form is read too.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from graphmend import fsutil
from graphmend.model import CheckReport, GraphBreak
from graphmend.report import break_code

VERSION = 1
DEFAULT_REASON = "accepted when the baseline was written"
_FP = re.compile(r"^[0-9a-f]{8,64}$")


class BaselineError(Exception):
    """A baseline file that cannot be read; ``str()`` is one line naming the file."""


@dataclass(frozen=True)
class Entry:
    fingerprint: str
    reason: str
    accepted_in: str  # the commit the break was accepted at ("" when unknown)
    file: str = ""
    line: int = 0
    code: str = ""
    target: Optional[str] = None

    def to_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "reason": self.reason, "accepted_in": self.accepted_in,
                "file": self.file, "line": self.line, "code": self.code, "target": self.target}


@dataclass(frozen=True)
class Update:
    entries: tuple[Entry, ...]
    added: tuple[Entry, ...]
    kept: tuple[Entry, ...]
    removed: tuple[Entry, ...]
    held: tuple[Entry, ...]  # gone from the report but kept: a target could not run


def read(path: Path) -> tuple[Entry, ...]:
    """The entries of a baseline file; an absent file has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BaselineError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: expected an object with \"accepted\", got {type(data).__name__}")
    out: dict[str, Entry] = {}
    for i, item in enumerate(data.get("accepted") or []):
        if not isinstance(item, dict) or not _FP.match(str(item.get("fingerprint", ""))):
            raise BaselineError(f"{path}: accepted[{i}]: expected an object with a hex \"fingerprint\"")
        line = item.get("line")
        out.setdefault(item["fingerprint"], Entry(
            fingerprint=item["fingerprint"], reason=str(item.get("reason") or ""),
            accepted_in=str(item.get("accepted_in") or ""), file=str(item.get("file") or ""),
            line=line if isinstance(line, int) else 0, code=str(item.get("code") or ""),
            target=item.get("target") if isinstance(item.get("target"), str) else None))
    for i, fp in enumerate(data.get("fingerprints") or []):  # the older, bare form
        if not isinstance(fp, str) or not _FP.match(fp):
            raise BaselineError(f"{path}: fingerprints[{i}]: expected a hex fingerprint, got {fp!r}")
        out.setdefault(fp, Entry(fingerprint=fp, reason="", accepted_in=""))
    return tuple(out.values())


def render(entries: tuple[Entry, ...] | list[Entry]) -> str:
    ordered = sorted(entries, key=lambda e: (e.file, e.fingerprint))
    data = {"version": VERSION, "accepted": [e.to_json() for e in ordered]}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def current_commit(root: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _entry(b: GraphBreak, target: Optional[str], reason: str, commit: str) -> Entry:
    return Entry(fingerprint=b.fingerprint, reason=reason, accepted_in=commit, file=b.file, line=b.line,
                 code=break_code(b), target=target)


def update(existing: tuple[Entry, ...], report: CheckReport, *, reason: str = DEFAULT_REASON, commit: str = "",
           prune: bool = True) -> Update:
    """The baseline that accepts every break in ``report``, keeping what was accepted before as it was."""
    found: dict[str, Entry] = {}
    for t in report.targets:
        for b in t.breaks:
            if b.fingerprint:
                found.setdefault(b.fingerprint, _entry(b, t.name, reason, commit))
    for b in report.static:
        if b.fingerprint:
            found.setdefault(b.fingerprint, _entry(b, None, reason, commit))
    old = {e.fingerprint: e for e in existing}
    kept = tuple(e for fp, e in old.items() if fp in found)
    added = tuple(e for fp, e in found.items() if fp not in old)
    gone = [e for fp, e in old.items() if fp not in found]
    # A target that crashed reported nothing: its accepted breaks are unseen, not fixed.
    blind = report.failed or not prune
    held = tuple(gone) if blind else ()
    removed = () if blind else tuple(gone)
    entries = tuple(sorted(kept + added + held, key=lambda e: (e.file, e.fingerprint)))
    return Update(entries, added, kept, removed, held)


def write(path: Path, result: Update) -> bool:
    """Write the file; False when it already holds exactly these bytes."""
    text = render(result.entries)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.write_text(path, text)
    return True
