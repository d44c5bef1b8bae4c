"""The base's results, kept between runs: ``--cache-dir`` (the action's ``cache-dir`` input).

A pull request's base commit is analysed once; every later run on it (a new push to the pull
request, another pull request on the same base, another shard) reads the results instead of
running the base's targets again. An entry holds the base's ``CheckReport`` (findings, what
each target read, how long each target took) under a key made of the base SHA, a digest of the
analysis configuration, and the GraphMend and torch versions: any of them changing is a miss.

The folder is meant to be saved and restored by ``actions/cache`` on ephemeral runners, so an
entry is an input like ``review.json``: it is read through the worker channel's door (a regular
file, never a symlink, at most ``ENTRY_MAX_BYTES``), parsed, checked against
``schemas/base-cache.schema.json`` and against the key it is stored under. A corrupted, oversized
or foreign entry is ignored with a message and the base runs again; it never decides a result.
The entry's digest of its report catches an edited or truncated entry; it is integrity, not
authenticity: what keeps a pull request's code from writing the folder is the sandbox (the
folder is never inside it) and ``actions/cache``'s scoping of what a pull request may save.

An entry may cover only some targets (a shard that ran the base for its share): ``targets`` lists
them, and the others run. Storing merges with what the entry already holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from graphmend import __version__, fsutil
from graphmend.config import Config
from graphmend.model import CheckReport, TargetResult, from_dict, to_dict

FORMAT = "graphmend-base-cache"
VERSION = 1
ENTRY_MAX_BYTES = 256 * 1024 * 1024
_KEY = re.compile(r"^[0-9a-f]{40}-[0-9a-f]{16}$")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphmend" / "base"


def torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def config_digest(config: Config) -> str:
    """What else changes the base's results: the analysis configuration (not where it lives)."""
    settings = to_dict(dataclasses.replace(config, root=Path("."), file=None))
    blob = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_key(base_sha: str, config: Config) -> str:
    """The base SHA plus a digest of the analysis config, the GraphMend, torch and Python versions
    and the machine (its architecture, and whether it has an NVIDIA device: with ``device: auto``
    a CPU runner's results are not a GPU runner's)."""
    machine = [platform.python_version(), platform.machine(), os.path.exists("/dev/nvidiactl")]
    blob = json.dumps([config_digest(config), __version__, torch_version(), machine], sort_keys=True)
    return f"{base_sha}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Entry:
    report: CheckReport
    targets: frozenset[str]  # the targets whose results it holds
    static: bool  # whether it holds the static candidates (and file errors) of the whole tree

    def target(self, name: str) -> Optional[TargetResult]:
        return next((t for t in self.report.targets if t.name == name), None) if name in self.targets else None


def load(cache_dir: Optional[Path], key: str, say: Callable[[str], None] = lambda _m: None) -> Optional[Entry]:
    """The entry stored under ``key``, or None (absent, or refused with a message through ``say``)."""
    from graphmend import schemas
    from graphmend.runner.channel import ChannelError, clean_text, read_file

    if cache_dir is None or not _KEY.match(key):
        return None
    name = f"{key}.json"
    try:
        raw = read_file(Path(cache_dir), name, ENTRY_MAX_BYTES)
    except ChannelError as exc:
        if not str(exc).endswith("is missing"):
            say(f"cache: ignoring the entry for {key[:12]}: {clean_text(str(exc))[:300]}")
        return None
    except OSError as exc:  # the folder itself is missing or unreadable
        if not isinstance(exc, FileNotFoundError):
            say(f"cache: cannot read {cache_dir}: {exc.strerror or exc}")
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
        schemas.validate("base-cache", data)
        if data["digest"] != _digest(data["report"]):
            raise ValueError("its contents do not match their digest (edited or corrupted)")
        if data["key"] != key:
            raise ValueError(f"it was stored under another key ({clean_text(str(data['key']))[:60]})")
        if data["graphmend"] != __version__ or data["torch"] != torch_version():
            raise ValueError("it was written by another GraphMend or torch version")
        report = _vetted(from_dict(CheckReport, data["report"]))
        held = {t.name for t in report.targets}
        targets = frozenset(n for n in data["targets"] if n in held)
        if len(targets) != len(data["targets"]):
            raise ValueError("it lists targets whose results it does not hold")
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as exc:
        # schemas.SchemaValidationError is a ValueError
        say(f"cache: ignoring the entry for {key[:12]}: {clean_text(str(exc))[:300]}")
        return None
    return Entry(report, targets, bool(data["static"]))


def _vetted(report: CheckReport) -> CheckReport:
    """A record with one path that is not plain and repo-relative vouches for nothing (None)."""
    from graphmend.runner.channel import repo_paths

    targets = tuple(t if t.depends_on is None or repo_paths(list(t.depends_on)) is not None
                    else dataclasses.replace(t, depends_on=None) for t in report.targets)
    return dataclasses.replace(report, targets=targets)


def _digest(report: Any) -> str:
    return hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest()


def store(cache_dir: Optional[Path], key: str, report: CheckReport, *, targets: list[str], static: bool,
          say: Callable[[str], None] = lambda _m: None) -> None:
    """Keep the base's results for ``targets`` (and its static pass when ``static``), merged with
    what the entry already holds. A target that could not run is not kept: the next run tries it
    again; nor are file errors of a static pass (a crash there may not repeat)."""
    if cache_dir is None:
        return
    ok = [t for t in report.targets if t.name in targets and not t.error]
    static = static and not report.errors
    old = load(cache_dir, key, say)
    if old is not None:
        mine = {t.name for t in ok}
        ok += [t for t in old.report.targets if t.name in old.targets and t.name not in mine]
        if not static and old.static:
            static, report = True, dataclasses.replace(report, static=old.report.static, errors=old.report.errors)
    if not ok and not static:
        return
    kept = CheckReport(targets=tuple(sorted(ok, key=lambda t: t.name)),
                       static=report.static if static else (), errors=())
    data = {"format": FORMAT, "version": VERSION, "key": key, "base_sha": key.split("-")[0],
            "graphmend": __version__, "torch": torch_version(), "targets": sorted(t.name for t in ok),
            "static": static, "report": to_dict(kept)}
    data["digest"] = _digest(data["report"])
    text = json.dumps(data, sort_keys=True)
    if len(text.encode()) > ENTRY_MAX_BYTES:
        say(f"cache: the base's results are over {ENTRY_MAX_BYTES} bytes; not cached")
        return
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        path = cache_dir / f"{key}.json"
        if path.is_symlink():
            path.unlink()  # a planted link is replaced, never written through
        fsutil.write_text(path, text)
    except OSError as exc:
        say(f"cache: cannot write {cache_dir}: {exc.strerror or exc}")
