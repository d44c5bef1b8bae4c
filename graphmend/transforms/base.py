"""The contract every rewrite rule implements.

A rule is one subclass of :class:`Transform` in one file of ``graphmend/transforms/``; the
registry (``registry.py``) finds it, the engine (``engine.py``) runs it. A rule never writes
files and never raises on a site it does not like: it returns *values*.

How a rule is called
--------------------
``Transform.run(source, ctx, lines)`` is the one entry point. ``source`` is a parsed
:class:`SourceFile` (libcst module + metadata: positions, scope, parents). ``lines`` is the
set of break lines Dynamo reported in this file for this rule (dynamic mode), or ``None`` in
static mode, where every candidate site is looked at. The default ``run`` walks the sites
the rule yields from :meth:`Transform.sites`, keeps those whose *header* covers a break
line (:meth:`Transform.site_lines`), and calls :meth:`Transform.rewrite` on each. It returns
a list of outcomes, one per site:

* :class:`graphmend.model.Fix` — whole-line ``Edit`` s, the rule code, the safety, a title.
  A fix touching several places (a helper + the call site, or an added ``import torch``)
  is ONE ``Fix`` with several edits; the engine applies it atomically.
* :class:`graphmend.model.Decline` — the rule looked and refused; ``reason`` is a sentence
  a person can read ("the else-branch calls self.cache.update(), which may mutate state").
* :class:`Failure` — the rule itself crashed on this site (a bug, never the user's fault);
  the engine turns exceptions from ``rewrite`` into these, so one bad site never stops a run.

Building a fix
--------------
Rules build new libcst nodes and let :class:`SourceFile` turn them into text edits:
``source.replace(old, new)`` returns a new module tree, ``source.with_import(tree)`` adds
``import torch`` when the module does not bind it, ``source.with_helper(tree, name, code)``
adds a module-level helper once, and ``source.fix_from(tree, ...)`` diffs the new tree's
code against the original lines and returns the ``Fix``. Because edits are computed by a
line diff of libcst's own rendering, formatting and comments outside the changed statements
are untouched by construction.

Examples are tests
------------------
``VALID`` is a tuple of programs the rule must leave unchanged (in static mode, with unsafe
fixes allowed); ``INVALID`` is a tuple of ``(before, after)`` pairs: running the rule (static
mode, unsafe allowed) on ``before`` and applying its fixes must give exactly ``after``. A
generic test runs them for every registered rule, checks idempotence (fixing ``after`` again
changes nothing) and that ``docs`` has every section of :data:`DOC_SECTIONS`.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator, Mapping, Optional, Union

import libcst as cst
from libcst.metadata import (
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from graphmend.model import Category, Decline, Edit, Fix, Frame, Safety
from graphmend.sources import line_ending, split_lines, with_line_ending
from graphmend.transforms._analysis import dotted
from graphmend.transforms._runtime_copy import RuntimeSpot

DOC_SECTIONS = (
    "What it does",
    "Why it breaks the graph",
    "Example",
    "Use instead",
    "Fix safety",
    "References",
)


@dataclass(frozen=True)
class Failure:
    """A rule crashed on a site; the site is left alone and the run goes on."""

    rule: str
    file: str
    line: int
    error: str


@dataclass(frozen=True)
class Suppressed:
    """A site the user silenced with ``# graphmend: ignore[...]``; never rewritten."""

    rule: str
    file: str
    line: int


Outcome = Union[Fix, Decline, Failure, Suppressed]


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know about the run besides the source.

    ``threshold`` is the lowest safety applied (``fix.safety`` / ``--unsafe-fixes``); rules
    still return fixes above it (the engine reports them as needing opt-in). ``device`` and
    ``dtype`` are the target's when known (None in static mode): trap lowering is safe on CPU
    but not on CUDA. ``runtime`` is where the file's copy of the GM2xx/GM3xx runtime is when
    the file is in a package (``_runtime_copy.locate``); None keeps the runtime inline. ``verified`` is True when the sites come from a real Dynamo run, so a
    rule may rely on re-detection and equivalence checks that follow (e.g. for shapes it
    cannot see statically); in static mode it must be more conservative.
    """

    file: str = "<memory>"
    threshold: Safety = Safety.SAFE
    select: tuple[str, ...] = ("GM",)
    ignore: tuple[str, ...] = ()
    device: Optional[str] = None
    dtype: Optional[str] = None
    verified: bool = False
    # Where this file's runtime copy is (a file in a package), or None: the runtime goes inline.
    runtime: Optional["RuntimeSpot"] = None
    # Dynamic mode: the tree the breaks were found in (other files of the repository may be read
    # from it, never written) and, per break line of this file, the user stacks Dynamo reported
    # there (outermost first): where a deferred call's boundary may be in another file.
    root: Optional[str] = None
    stacks: tuple[tuple[int, tuple[Frame, ...]], ...] = ()
    # Dynamic mode: lines of this file whose call reached an output break of ANOTHER file (a print,
    # a log, a warning there), and that break's location: output that stays immediate.
    reached: tuple[tuple[int, str], ...] = ()

    def selects(self, code: str) -> bool:
        """ruff-style prefix selection: the longest matching prefix wins, ignore wins ties."""
        best_sel = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        best_ign = max((len(p) for p in self.ignore if code.startswith(p)), default=-1)
        return best_sel >= 0 and best_sel > best_ign


class SourceError(Exception):
    """A file that cannot be parsed (syntax error, not UTF-8, binary); message is one line."""


class _Parsed:
    """One text's libcst module and metadata. Scopes are resolved when a rule first asks: most
    runs need positions and parents only, and scope analysis costs about as much as both."""

    def __init__(self, text: str):
        self.wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        self.module = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)

    @functools.cached_property
    def scopes(self) -> Mapping[cst.CSTNode, Optional[Scope]]:
        return self.wrapper.resolve(ScopeProvider)


# The last texts parsed, most recent last. The same text is parsed again and again: the engine
# parses a rewrite to check it, then the next round parses it to run the rules (a script's
# rewrite carries a ~30 kB runtime copy); check, fix and verify read the same files. libcst nodes
# and their metadata are immutable, so every SourceFile of one text shares one parse.
# Bounded by count and by size (a parse holds ~400 bytes per character of source).
_PARSED: "collections.OrderedDict[str, _Parsed]" = collections.OrderedDict()
_PARSED_MAX = 8
_PARSED_MAX_CHARS = 1_000_000


def _parsed(path: str, text: str) -> _Parsed:
    hit = _PARSED.get(text)
    if hit is not None:
        _PARSED.move_to_end(text)
        return hit
    try:
        parsed = _Parsed(text)
    except cst.ParserSyntaxError as exc:
        raise SourceError(f"{path}:{exc.raw_line}: syntax error: {exc.message}") from None
    except Exception as exc:  # libcst raises a few other types on odd input
        raise SourceError(f"{path}: cannot parse: {exc}") from None
    _PARSED[text] = parsed
    while len(_PARSED) > 1 and (len(_PARSED) > _PARSED_MAX or sum(map(len, _PARSED)) > _PARSED_MAX_CHARS):
        _PARSED.popitem(last=False)
    return parsed


class SourceFile:
    """One Python file, parsed once, with the metadata rules need and edit helpers."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.lines = split_lines(text)
        self._parsed = _parsed(path, text)
        self.wrapper = self._parsed.wrapper
        self.module = self._parsed.module
        self.positions = self._parsed.positions
        self.parents = self._parsed.parents

    @property
    def scopes(self) -> Mapping[cst.CSTNode, Optional[Scope]]:
        return self._parsed.scopes

    def own_line_ending(self, fix: Fix) -> Fix:
        """``fix`` with the lines it writes ending as this file's lines end (a CRLF file gets CRLF
        in a generated helper, import or runtime line too)."""
        newline = line_ending(self.text)
        if newline == "\n":
            return fix
        edits = tuple(dataclasses.replace(e, new_text=with_line_ending(e.new_text, newline)) if e.file == self.path else e
                      for e in fix.edits)
        return dataclasses.replace(fix, edits=edits)

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> "SourceFile":
        if b"\x00" in data:
            raise SourceError(f"{path}: binary file (contains NUL bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceError(f"{path}: not UTF-8 (byte {exc.start})") from None
        return cls(path, text)

    # -- positions --------------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def end_line(self, node: cst.CSTNode) -> int:
        return self.positions[node].end.line

    def header_lines(self, node: cst.CSTNode) -> range:
        """The lines a Dynamo break inside this statement's header is reported on.

        For a compound statement it is from its first line to the line before its body
        (Dynamo reports the line of the jump instruction, which for a multi-line condition
        is one of the condition's lines); for a simple statement, all of its lines.
        """
        start = self.line(node)
        body = getattr(node, "body", None)
        if isinstance(body, cst.BaseSuite):
            inner = body.body if isinstance(body, cst.IndentedBlock) else ()
            if inner:
                return range(start, max(start, self.line(inner[0]) - 1) + 1)
            return range(start, self.end_line(node) + 1)
        return range(start, self.end_line(node) + 1)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def enclosing(self, node: cst.CSTNode, kinds: tuple[type, ...]) -> Optional[cst.CSTNode]:
        cur = self.parents.get(node)
        while cur is not None and not isinstance(cur, kinds):
            cur = self.parents.get(cur)
        return cur

    def function_name(self, node: cst.CSTNode) -> str:
        """Dotted name of the enclosing functions/classes, for fingerprints and messages."""
        names = []
        cur = self.parents.get(node)
        while cur is not None:
            if isinstance(cur, (cst.FunctionDef, cst.ClassDef)):
                names.append(cur.name.value)
            cur = self.parents.get(cur)
        return ".".join(reversed(names)) or "<module>"

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def suppressed(self, line: int, code: str) -> bool:
        """``# graphmend: ignore`` or ``# graphmend: ignore[GM101, ...]`` on ``line``."""
        if not 1 <= line <= len(self.lines):
            return False
        return suppression_covers(self.lines[line - 1], code)

    # -- building fixes ---------------------------------------------------------------

    def replace(self, tree: cst.Module, old: cst.CSTNode, new: Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]) -> cst.Module:
        """``tree`` with ``old`` (a node of the ORIGINAL module) replaced by ``new``.

        Call it repeatedly starting from ``source.module``; node identity is preserved for
        the parts not replaced, so several replacements compose.
        """
        # Comments and blank lines above a statement belong to its node in libcst; keep
        # them on the replacement so the edit never eats the user's comments.
        lead = getattr(old, "leading_lines", None)
        if lead:
            if isinstance(new, cst.FlattenSentinel) and new.nodes and hasattr(new.nodes[0], "leading_lines"):
                first = new.nodes[0]
                if not first.leading_lines:
                    new = cst.FlattenSentinel([first.with_changes(leading_lines=lead), *list(new.nodes)[1:]])
            elif hasattr(new, "leading_lines") and not new.leading_lines:  # type: ignore[union-attr]
                new = new.with_changes(leading_lines=lead)  # type: ignore[union-attr]
        return tree.deep_replace(old, new)  # type: ignore[return-value]

    def replace_many(self, tree: cst.Module, changes: dict) -> cst.Module:
        """``tree`` with several of its nodes replaced in one pass (``{old: new}``; ``new`` may be
        a node, ``cst.FlattenSentinel`` or ``cst.RemoveFromParent()``). Leading comments are kept
        as in :meth:`replace`."""
        kept = {}
        for old, new in changes.items():
            lead = getattr(old, "leading_lines", None)
            if lead and isinstance(new, cst.FlattenSentinel) and new.nodes and not getattr(new.nodes[0], "leading_lines", True):
                new = cst.FlattenSentinel([new.nodes[0].with_changes(leading_lines=lead), *list(new.nodes)[1:]])
            elif lead and isinstance(new, cst.CSTNode) and hasattr(new, "leading_lines") and not new.leading_lines:  # type: ignore[attr-defined]
                new = new.with_changes(leading_lines=lead)
            kept[id(old)] = new

        class _Replace(cst.CSTTransformer):
            def on_leave(self, original_node, updated_node):  # type: ignore[override]
                return kept.get(id(original_node), updated_node)

        return tree.visit(_Replace())  # type: ignore[return-value]

    def torch_name(self) -> Optional[str]:
        """The module-level name bound to ``torch`` (``torch`` or an ``import torch as th``)."""
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            if dotted(alias.name) == "torch":
                                return alias.asname.name.value if alias.asname else "torch"  # type: ignore[union-attr]
                            if dotted(alias.name).startswith("torch.") and alias.asname is None:
                                return "torch"
        return None

    def with_import(self, tree: cst.Module, module: str = "torch") -> cst.Module:
        """``tree`` with ``import <module>`` after the docstring / ``__future__`` / imports.

        Nothing is added when the original module already binds the name at module level.
        """
        if module == "torch" and self.torch_name() is not None:
            return tree
        body = list(tree.body)
        index = 0
        for i, stmt in enumerate(body):
            if _is_docstring(stmt) and i == 0:
                index = 1
            elif isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
                index = i + 1
            else:
                break
        new_stmt = cst.parse_statement(f"import {module}\n")
        body.insert(index, new_stmt)
        return tree.with_changes(body=body)

    def with_helper(self, tree: cst.Module, name: str, code: str) -> cst.Module:
        """``tree`` with a module-level helper ``code`` (defining ``name``) added once.

        It goes after the imports at the top, so every use below can see it. If the original
        module already defines ``name`` at module level nothing is added.
        """
        for stmt in self.module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
                return tree
        body = list(tree.body)
        index = 0
        for i, stmt in enumerate(body):
            if (_is_docstring(stmt) and i == 0) or (
                isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
            ):
                index = i + 1
            else:
                break
        helper = list(cst.parse_module(code).body)
        if helper and index > 0:  # PEP 8: two blank lines around a top-level definition
            blank = (cst.EmptyLine(), cst.EmptyLine())
            helper[0] = helper[0].with_changes(leading_lines=blank + tuple(helper[0].leading_lines))
        body[index:index] = helper
        return tree.with_changes(body=body)

    def edits_to(self, tree: cst.Module) -> tuple[Edit, ...]:
        """Whole-line edits that turn the original text into ``tree.code`` (a line diff)."""
        return diff_edits(self.path, self.text, tree.code)

    def fix_from(
        self,
        tree: cst.Module,
        *,
        rule: str,
        title: str,
        safety: Safety,
        site: cst.CSTNode,
        notes: str = "",
        kind: str = "",
    ) -> Fix:
        from graphmend.model import fingerprint

        line = self.line(site)
        return Fix(
            rule=rule,
            title=title,
            safety=safety,
            edits=self.edits_to(tree),
            file=self.path,
            line=line,
            fingerprint=fingerprint(self.path, self.function_name(site), kind or rule, self.lines[line - 1] if line <= len(self.lines) else ""),
            notes=notes,
        )


def diff_edits(path: str, old_text: str, new_text: str) -> tuple[Edit, ...]:
    """The minimal whole-line edits from ``old_text`` to ``new_text``, top to bottom."""
    old = split_lines(old_text)
    new = split_lines(new_text)
    edits = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(Edit(file=path, start_line=i1 + 1, end_line=i2, new_text="".join(new[j1:j2]), old_text="".join(old[i1:i2])))
    return tuple(edits)


def suppression_covers(line_text: str, code: str) -> bool:
    """The project's one suppression parser (``graphmend.sources.suppressed``)."""
    from graphmend.sources import suppressed

    return suppressed(line_text, code)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class Transform:
    """Base class of every rule. Subclass it in one file of ``graphmend/transforms/``.

    Class attributes (all required on a concrete rule; the registry checks them):

    ``code``        stable rule code, ``GM`` + 3 digits (``GM1xx`` predicated control flow,
                    ``GM2xx`` deferred side effects, ``GM3xx`` trap lowering)
    ``name``        kebab-case name of the *pattern* it fixes (``data-dependent-branch``)
    ``summary``     one line for ``graphmend rules``: what it fixes
    ``safety``      the best safety its fixes can have; a fix may be lower per site
    ``categories``  the :class:`Category` values of breaks it handles (dynamic mode routes
                    a break to the rules whose categories contain the break's category, or
                    whose code equals the break's ``rule``)
    ``gb_types``    Dynamo's graph-break types (registry short names) it handles, for docs
    ``docs``        mapping section -> markdown text, with every section of DOC_SECTIONS
    ``VALID``       programs left unchanged;  ``INVALID``: (before, after) pairs
    """

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    safety: ClassVar[Safety] = Safety.SAFE
    categories: ClassVar[tuple[Category, ...]] = ()
    gb_types: ClassVar[tuple[str, ...]] = ()
    docs: ClassVar[dict[str, str]] = {}
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[tuple[str, str], ...]] = ()

    # -- to implement -----------------------------------------------------------------

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        """Every statement this rule could rewrite (cheap syntactic match, no legality)."""
        raise NotImplementedError

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        """Prove the rewrite legal and return the Fix, or a Decline naming the failed condition."""
        raise NotImplementedError

    # -- optional hooks ---------------------------------------------------------------

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        """The lines a reported break must fall on to be this site's (default: the header)."""
        return source.header_lines(node)

    def static_candidate(self, node: cst.CSTNode, source: SourceFile) -> bool:
        """Static mode only (no break lines): whether a site is worth looking at without a
        Dynamo report. Default: every site. A rule whose sites are common Python (every
        ``if``) narrows this to what evidently involves a tensor, so that plain Python is
        neither rewritten nor reported."""
        return True

    def prefilter(self, text: str) -> bool:
        """A cheap textual test before parsing (TorchFix's habit); default: mentions torch."""
        return "torch" in text

    # -- provided ---------------------------------------------------------------------

    def decline(self, source: SourceFile, node: cst.CSTNode, reason: str) -> Decline:
        from graphmend.model import fingerprint

        line = source.line(node)
        text = source.lines[line - 1] if line <= len(source.lines) else ""
        return Decline(rule=self.code, file=source.path, line=line, reason=reason,
                       fingerprint=fingerprint(source.path, source.function_name(node), self.code, text))

    def run(self, source: SourceFile, ctx: RuleContext, lines: Optional[Iterable[int]] = None) -> list[Outcome]:
        wanted = None if lines is None else set(lines)
        outcomes: list[Outcome] = []
        for node in self.sites(source):
            span = self.site_lines(node, source)
            if wanted is not None and not wanted.intersection(span):
                continue
            if wanted is None and not self.static_candidate(node, source):
                continue
            if any(source.suppressed(n, self.code) for n in span):
                outcomes.append(Suppressed(rule=self.code, file=source.path, line=source.line(node)))
                continue
            try:
                outcomes.append(self.rewrite(node, source, ctx))
            except Exception as exc:  # a bug in the rule: report it, leave the site alone
                outcomes.append(Failure(rule=self.code, file=source.path, line=source.line(node),
                                        error=f"{type(exc).__name__}: {exc}"))
        return outcomes


# libcst computes a node's ``children`` by running a visitor over it, and the rules walk the same
# nodes many times (every caller of every function, every pass): a node's children are kept. Nodes
# are immutable; each is kept by id together with the node itself, so its id is not reused while
# the entry lives. Bounded: past the bound the whole table starts again.
_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}
_CHILDREN_MAX = 500_000


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """``node.children`` (in source order), computed once per node."""
    hit = _CHILDREN.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    found = tuple(node.children)
    if len(_CHILDREN) >= _CHILDREN_MAX:
        _CHILDREN.clear()
    _CHILDREN[id(node)] = (node, found)
    return found


def iter_nodes(node: cst.CSTNode, kinds: tuple[type, ...]) -> Iterator[cst.CSTNode]:
    """All descendants of ``node`` (itself included) of the given types, in source order."""
    todo = [node]
    while todo:
        cur = todo.pop()
        if isinstance(cur, kinds):
            yield cur
        todo.extend(reversed(children(cur)))


__all__ = [
    "DOC_SECTIONS",
    "Failure",
    "Outcome",
    "RuleContext",
    "SourceError",
    "SourceFile",
    "Suppressed",
    "Transform",
    "diff_edits",
    "children",
    "iter_nodes",
    "suppression_covers",
]
