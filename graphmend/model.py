"""The values that cross every boundary of GraphMend.

Everything here is a frozen dataclass of plain data (str, int, float, bool, None, tuples of
those, nested dataclasses) so that a value can go to JSON and come back unchanged with
``to_dict`` / ``from_dict``. No torch tensors, libcst nodes or PyGithub objects live here.

Positions: lines are 1-based, columns 0-based (libcst's convention); reporters convert.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

SCHEMA_VERSION = 1


class Category(str, enum.Enum):
    """What kind of graph break a finding is; one table maps Dynamo's breaks onto these."""

    DATA_DEPENDENT_BRANCH = "data-dependent-branch"
    SIDE_EFFECT = "side-effect"  # print / logging / warnings
    VALIDATION = "validation"  # raise guarded by a tensor condition
    SCALAR = "scalar"  # .item() / .tolist() feeding Python
    DYNAMIC_SHAPE = "dynamic-shape"  # nonzero, boolean-mask indexing, data-dependent operators
    UNSUPPORTED_CALL = "unsupported-call"
    SKIPPED_FRAME = "skipped-frame"
    OTHER = "other"


class Safety(str, enum.Enum):
    """ruff's fix-safety levels, with this domain's meaning (DESIGN.md, "Safety levels")."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    DISPLAY_ONLY = "display-only"

    @property
    def rank(self) -> int:
        return {"safe": 0, "unsafe": 1, "display-only": 2}[self.value]

    def allowed_by(self, threshold: "Safety") -> bool:
        """True when a fix of this safety may be applied at the configured ``threshold``."""
        if self is Safety.DISPLAY_ONLY:
            return False
        return self.rank <= threshold.rank


class Lever(str, enum.Enum):
    """What could remove a break: a source rule, a compile configuration, or nothing known."""

    RULE = "rule"
    CONFIG = "config"
    NONE = "none"


@dataclass(frozen=True)
class Frame:
    """One frame of the user stack at a break, innermost last."""

    file: str  # repo-relative when inside the repository, else absolute
    line: int
    function: str
    inside_repo: bool = True


@dataclass(frozen=True)
class GraphBreak:
    """One distinct graph break (deduplicated by site), dynamic or static.

    ``verified`` is True for breaks Dynamo reported on a real run and False for static
    candidates found by reading the source.
    """

    file: str
    line: int
    reason: str
    category: Category
    col: Optional[int] = None
    source_line: str = ""
    function: str = ""
    gb_id: Optional[str] = None  # e.g. "GB0170", from torch/_dynamo/graph_break_registry.json
    gb_type: Optional[str] = None  # the registry's short name of the break
    doc_url: Optional[str] = None
    fixable: bool = False
    rule: Optional[str] = None  # the GM code that can fix it, or None
    lever: Lever = Lever.NONE
    lever_reason: str = ""
    fingerprint: str = ""
    hits: int = 1
    verified: bool = False
    outside_paths: bool = False
    stack: tuple[Frame, ...] = ()
    target: Optional[str] = None


@dataclass(frozen=True)
class Environment:
    """What a figure or a count depends on; recorded with every report."""

    torch_version: str = ""
    device: str = "cpu"
    dtype: str = "float32"
    backend: str = "eager"
    mode: str = "eval"
    python_version: str = ""


@dataclass(frozen=True)
class TargetResult:
    """Dynamic detection on one target. ``error`` is set when the target could not run."""

    name: str
    graph_count: int = 0
    break_count: int = 0
    breaks: tuple[GraphBreak, ...] = ()
    error: Optional[str] = None
    environment: Environment = field(default_factory=Environment)
    skipped_frames: int = 0
    duration_s: float = 0.0
    # repo-relative files Dynamo traced on this run; static candidates are for the others
    traced_files: tuple[str, ...] = ()
    # repo-relative files the run opened, imported or traced: a pull request that changes none
    # of them cannot change this result. None: no complete record (it vouches for nothing).
    depends_on: Optional[tuple[str, ...]] = None
    recompiles: int = 0  # frames Dynamo compiled again on this run (their guards failed)


@dataclass(frozen=True)
class FileError:
    """A file (or other input item) that could not be processed; the run went on."""

    path: str
    message: str


@dataclass(frozen=True)
class CheckReport:
    """What ``graphmend check`` found. JSON shape: schemas/check.schema.json."""

    targets: tuple[TargetResult, ...] = ()
    static: tuple[GraphBreak, ...] = ()
    errors: tuple[FileError, ...] = ()
    version: int = SCHEMA_VERSION

    @property
    def failed(self) -> bool:
        """A crashed target or an unreadable input is never green."""
        return bool(self.errors) or any(t.error for t in self.targets)

    @property
    def all_breaks(self) -> tuple[GraphBreak, ...]:
        found = [b for t in self.targets for b in t.breaks]
        return tuple(found) + tuple(self.static)


@dataclass(frozen=True)
class Edit:
    """Replace whole lines ``start_line..end_line`` (inclusive, 1-based) of ``file``.

    Whole-line edits map one-to-one onto GitHub suggestions. ``end_line == start_line - 1``
    inserts ``new_text`` before ``start_line`` without removing anything.
    """

    file: str
    start_line: int
    end_line: int
    new_text: str  # the replacement lines, each ending in "\\n"
    old_text: str = ""  # the replaced lines, to check the edit still applies


FILE_ACTIONS = ("create", "update", "unchanged")


@dataclass(frozen=True)
class FileWrite:
    """A whole file a fix needs in the repository besides its line edits (the shared runtime
    module, ``<package>/_graphmend_runtime.py``).

    ``action`` is what writing it does to the tree the fix was computed against: ``create`` (the
    file is not there), ``update`` (an older copy written by GraphMend is replaced; ``old_text``
    is that copy, to check it is still what was read) or ``unchanged`` (the same text is there
    already: nothing to write). Several fixes needing the same file carry equal values;
    :func:`files_needed` gives each path once.
    """

    path: str  # relative to the repository root, "/"-separated
    text: str  # the whole content to write
    action: str = "create"  # one of FILE_ACTIONS
    old_text: str = ""  # the current content when action is "update" (or "unchanged")
    purpose: str = ""  # one line for people: "graphmend runtime 0.1.0 (sha256 1a2b3c4d5e6f)"


@dataclass(frozen=True)
class Fix:
    """A rewrite proposed by one rule for one break site; several edits make it a patch.

    ``files`` are whole files the fix needs besides its edits (see :class:`FileWrite`): the edits
    of a GM2xx/GM3xx fix in a package import the shared runtime module, which must be in the
    tree for the fixed file to run.
    """

    rule: str
    title: str
    safety: Safety
    edits: tuple[Edit, ...]
    file: str
    line: int
    fingerprint: str = ""
    notes: str = ""
    files: tuple[FileWrite, ...] = ()

    @property
    def is_single_range(self) -> bool:
        """Only a fix of one contiguous range can be a one-click GitHub suggestion."""
        return len(self.edits) == 1

    @property
    def edited_files(self) -> tuple[str, ...]:
        """The files this fix's edits change, sorted (usually just ``file``)."""
        return tuple(sorted({e.file for e in self.edits}))

    @property
    def writes_files(self) -> tuple[FileWrite, ...]:
        """The files of ``files`` that applying the fix creates or updates (not ``unchanged``)."""
        return tuple(f for f in self.files if f.action != "unchanged")


def files_needed(fixes: "typing.Iterable[Fix]") -> tuple[FileWrite, ...]:
    """The whole files a set of fixes needs, each path once, sorted by path.

    Fixes computed against the same tree carry equal :class:`FileWrite` values for a shared file;
    two different contents for one path is a bug and raises ``ValueError``.
    """
    seen: dict[str, FileWrite] = {}
    for fix in fixes:
        for f in fix.files:
            old = seen.setdefault(f.path, f)
            if old.text != f.text:
                raise ValueError(f"two fixes need different contents for {f.path}")
    return tuple(v for _, v in sorted(seen.items()))


@dataclass(frozen=True)
class Decline:
    """A rule looked at a site and refused, with a reason a person can read."""

    rule: str
    file: str
    line: int
    reason: str
    fingerprint: str = ""


# --------------------------------------------------------------------------------------------
# Fingerprints


def fingerprint(file: str, function: str, kind: str, source_line: str, occurrence: int = 0) -> str:
    """A stable identity for a break site that survives unrelated edits.

    It uses the file, the enclosing function, the kind of break (GB id or category), the
    whitespace-normalised source text of the line and which occurrence of that text in the
    function this is; not the line number, which every edit above it changes.
    """
    text = " ".join(source_line.split())
    key = "\x1f".join([file, function, kind, text, str(occurrence)])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


# --------------------------------------------------------------------------------------------
# JSON round trip


def to_dict(value: Any) -> Any:
    """A dataclass (or tuple/list/dict/enum of them) as JSON-ready plain data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [to_dict(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_dict(v) for k, v in value.items()}
    return value


def from_dict(cls: Any, data: Any) -> Any:
    """The inverse of ``to_dict`` for the dataclasses of this module."""
    return _build(cls, data)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(tp: Any, data: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if data is None:
        return None
    if origin is typing.Union or (origin is not None and str(origin) == "types.UnionType"):
        inner = [a for a in args if a is not type(None)]
        return _build(inner[0], data) if len(inner) == 1 else data
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _build(hints[f.name], data[f.name])
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(_build(item, v) for v in data)
    if origin is list:
        return [_build(args[0], v) for v in data]
    return data
