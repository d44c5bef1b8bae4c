"""Static detection: graph-break candidates found by reading the source, no target needed.

A libcst pass over ``config.paths`` (minus ``exclude``) looks for the three fixable kinds of
break *inside compiled regions*:

* an ``if`` (or ``a if t else b``) whose condition depends on tensor data (GM101), or is a
  Python scalar read out of a tensor (``.item()``/``.tolist()``: category scalar, not fixable);
* ``print`` / ``logging`` / ``logger.*`` / ``warnings.warn`` called for their effect (GM2xx);
* ``if <tensor condition>: raise ...`` (GM301).

A compiled region is code reachable from the ``forward`` of an ``nn.Module`` subclass or from a
function decorated or wrapped with ``torch.compile``. Reachability is computed over the whole
set of scanned files (``self.m()`` calls, calls of functions of this or an imported module of the
repository), so every file is first reduced to plain *facts* (classes, functions, calls and the
candidate sites of each function) and the regions are resolved afterwards. That split also lets
the per-file work run in a process pool.

"Depends on tensor data" needs evidence: a call from a table of value-reading tensor methods and
functions (``.sum() .any() torch.isinf ...``), a name bound to such a value earlier in the function
(a bounded use-def trace: ``seq_len = pos.max() + 1`` ... ``if seq_len > limit:``), or a parameter
annotated as a tensor. A bare parameter is not assumed to be a tensor: ``if flag:`` stays quiet.
Findings are candidates (``verified=False``); dynamic detection is the ground truth.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import json
import multiprocessing
import os
import re
import sys
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from graphmend.config import Config
from graphmend.detect import classify as _classify
from graphmend.model import FileError, GraphBreak, fingerprint
from graphmend.sources import SourceError, iter_python_files, line_text, read_source, split_lines, suppressed

__all__ = ["StaticResult", "detect_static", "analyze_source", "PARALLEL_MIN_FILES"]

# Parsing is the cost; below this many files a process pool costs more than it saves.
PARALLEL_MIN_FILES = 50
# How many assignments a condition is traced back through (``a = x.max(); b = a + 1; if b:``).
MAX_TRACE = 4

_REGION = "\x00REGION\x00"  # filled in once the region reaching the function is known

# --------------------------------------------------------------------------------------------
# Dynamo's break ids (torch/_dynamo/graph_break_registry.json). Each id below was observed
# under torch 2.13 for the construct it is attached to; it is only reported when the installed
# registry still gives it the same gb_type, so a renumbered registry yields None, not a wrong id.

GB_BRANCH = ("GB0170", "Data-dependent branching")
GB_PRINT = ("GB0059", "Failed to trace builtin operator")
GB_LOGGER = ("GB0291", "logging.Logger method not supported for non-export cases")
GB_WARN = ("GB0007", "Attempted to call function marked as skipped")
GB_ITEM = ("GB0124", "Unsupported Tensor.item() call with capture_scalar_outputs=False")
GB_DATA_OP = ("GB0033", "Data dependent operator")  # torch.equal / allclose
DOC_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{}.html"


@lru_cache(maxsize=1)
def _registry() -> dict:
    """torch's graph-break registry, found without importing torch (that takes seconds)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / "_dynamo" / "graph_break_registry.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _gb(pair: tuple[str, str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(gb_id, gb_type, doc_url) when the installed registry confirms the id, else Nones."""
    gb_id, gb_type = pair
    entries = _registry().get(gb_id) or []
    if any(isinstance(e, dict) and e.get("Gb_type") == gb_type for e in entries):
        return gb_id, gb_type, DOC_URL.format(gb_id.lower())
    return None, None, None


# --------------------------------------------------------------------------------------------
# Tables

# Calls that read tensor data and return a tensor (so a condition using them is data-dependent).
VALUE_METHODS = frozenset(
    "sum max min mean any all amax amin argmax argmin prod norm std var count_nonzero "
    "isinf isnan isfinite isclose eq ne gt ge lt le".split()
)
VALUE_FUNCS = frozenset(
    "torch." + n
    for n in "any all isinf isnan isfinite isclose sum max min mean amax amin argmax argmin "
    "count_nonzero prod norm std var eq ne gt ge lt le logical_and logical_or logical_not "
    "linalg.norm".split()
)
# Calls that turn tensor data into a Python scalar: the call itself leaves the graph.
SCALAR_METHODS = frozenset({"item", "tolist"})
SCALAR_BUILTINS = frozenset({"int", "float", "bool", "complex"})
# torch functions returning a Python bool computed from data (Dynamo: "Data dependent operator").
DATA_OP_FUNCS = frozenset({"torch.equal", "torch.allclose", "torch.is_nonzero"})
DATA_OP_METHODS = frozenset({"equal", "allclose", "is_nonzero"})
# Tensor metadata: static under Dynamo (shapes are guarded, not read), never data-dependent.
# (Attributes other than PASS_ATTRS — `.shape`, `.dtype`, `self.training` — are never evidence.)
META_METHODS = frozenset(
    "size dim ndimension numel nelement stride is_contiguous is_floating_point is_complex "
    "get_device element_size data_ptr storage_offset type __len__ keys items values get "
    "is_pinned is_set_to has_names".split()
)
PASS_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
# torch namespaces / functions that return no tensor (configuration, predicates, dtypes ...).
NON_TENSOR_TORCH_PREFIXES = (
    "torch.compiler.", "torch._dynamo.", "torch.jit.", "torch.cuda.", "torch.backends.",
    "torch.distributed.", "torch.fx.", "torch.onnx.", "torch.utils.", "torch._C.", "torch.version.",
    "torch.autograd.", "torch.testing.", "torch.nn.modules.", "torch.nn.utils.", "torch.nn.init.",
    "torch.nn.parameter.",
)
NON_TENSOR_TORCH = frozenset(
    "torch.finfo torch.iinfo torch.device torch.dtype torch.Size torch.get_default_dtype "
    "torch.no_grad torch.enable_grad torch.inference_mode torch.autocast torch.manual_seed "
    "torch.compile torch.set_grad_enabled torch.get_autocast_gpu_dtype torch.cond torch.numel "
    "torch.result_type torch.promote_types torch.can_cast torch.broadcast_shapes torch.typename".split()
)
BENIGN_BUILTINS = frozenset({"len", "isinstance", "issubclass", "hasattr", "getattr", "callable", "type", "id", "range"})
REDUCING_BUILTINS = frozenset({"any", "all", "max", "min", "sum", "abs"})

LOG_METHODS = frozenset("debug info warning warn warning_once info_once error exception critical fatal log".split())
LOGGER_NAMES = frozenset({"logger", "log", "_logger", "_log", "LOGGER", "_LOGGER", "LOG"})
COMPILE_FUNCS = frozenset({"torch.compile"})
DISABLE_FUNCS = frozenset({"torch._dynamo.disable", "torch.compiler.disable", "torch._disable_dynamo"})
# Under Dynamo these return True while tracing, so code they guard off never reaches a graph.
COMPILING_GUARDS = frozenset({
    "torch.compiler.is_compiling", "torch._dynamo.is_compiling", "torch.compiler.is_dynamo_compiling",
    "torch._utils.is_compiling", "is_torchdynamo_compiling",
})
# Base classes known to be nn.Module subclasses although they live outside the scanned files.
MODULE_BASE_SUFFIXES = ("PreTrainedModel",)

# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class StaticResult:
    """What static detection found. ``files_scanned`` counts the Python files read;
    ``files_parsed`` those that mention torch and were parsed."""

    breaks: tuple[GraphBreak, ...] = ()
    errors: tuple[FileError, ...] = ()
    files_scanned: int = 0
    files_parsed: int = 0


@dataclass
class _Func:
    qualname: str
    cls: Optional[str]  # qualname of the class the function is a method of
    parent: Optional[str]  # qualname of the enclosing function for nested defs
    calls: set[str] = field(default_factory=set)  # "self:NAME" or "ref:dotted.name"
    compiled: bool = False  # decorated with torch.compile
    disabled: bool = False  # decorated with torch._dynamo.disable / torch.compiler.disable
    candidates: list[GraphBreak] = field(default_factory=list)


@dataclass
class FileFacts:
    """Everything the whole-repository step needs from one file (picklable, no libcst nodes)."""

    rel: str
    module: str
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # qualname -> resolved bases
    functions: dict[str, _Func] = field(default_factory=dict)
    compiled_refs: set[str] = field(default_factory=set)  # dotted refs wrapped by torch.compile(...)


def module_name(rel: str) -> str:
    """The dotted module name of a repo-relative ``.py`` path (``pkg/__init__.py`` -> ``pkg``)."""
    parts = rel[:-3].split("/") if rel.endswith(".py") else rel.split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------
# Evidence: why an expression is a tensor value (or a scalar read from one)

_TENSOR, _DATA_OP, _SCALAR = 0, 1, 2  # priority: the scalar read leaves the graph first


@dataclass(frozen=True)
class _Ev:
    kind: int
    node: cst.CSTNode  # the value-reading expression (rendered only for the final message)
    via: Optional[str] = None  # the traced name, when reached through an assignment
    at: Optional[cst.CSTNode] = None  # the statement that bound it


def _combine(*evs: Optional[_Ev]) -> Optional[_Ev]:
    best: Optional[_Ev] = None
    for ev in evs:
        if ev is not None and (best is None or ev.kind > best.kind):
            best = ev
    return best


def _short(code: str, limit: int = 60) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# Positions of a few nodes
#
# libcst's PositionProvider records a position for every node and then walks the tree once
# more through the metadata machinery; on a large file that costs more than the parse. The same
# code generation pass, recording only the nodes asked for, gives the same (syntactic) start
# positions for a fraction of it. It hooks libcst's CodegenState (internal, but the very hooks
# PositionProvider itself uses); if that ever moves, PositionProvider is used instead.

try:
    from libcst._nodes.internal import CodegenState as _CodegenState
except ImportError:  # pragma: no cover - a libcst without the internal codegen state
    _CodegenState = None

_NEWLINE_RE = re.compile(r"\r\n?|\n")
_NULL = contextlib.nullcontext()


if _CodegenState is not None:

    class _StartsState(_CodegenState):  # type: ignore[misc, valid-type]
        """Code generation that tracks line/column and records the start of wanted nodes."""

        def __init__(self, module: cst.Module, wanted: set[int]):
            super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
            self.wanted = wanted
            self.starts: dict[int, tuple[int, int]] = {}
            self.line = 1
            self.column = 0

        def _advance(self, value: str) -> None:
            if "\n" in value or "\r" in value:
                parts = _NEWLINE_RE.split(value)
                self.line += len(parts) - 1
                self.column = len(parts[-1])
            else:
                self.column += len(value)

        def add_indent_tokens(self) -> None:
            for token in self.indent_tokens:
                self.tokens.append(token)
                self._advance(token)

        def add_token(self, value: str) -> None:
            self.tokens.append(value)
            self._advance(value)

        def before_codegen(self, node: cst.CSTNode) -> None:
            if id(node) in self.wanted:
                self.starts[id(node)] = (self.line, self.column)

        def record_syntactic_position(self, node, *, start_node=None, end_node=None):
            # A statement's syntactic start skips its leading blank lines and comments.
            if id(node) in self.wanted and start_node is None:
                self.starts[id(node)] = (self.line, self.column)
            return _NULL


def _node_starts(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> dict[int, tuple[int, int]]:
    """``id(node) -> (line, column)`` (1-based line, 0-based column) for each of ``nodes``."""
    if _CodegenState is not None:
        state = _StartsState(module, {id(n) for n in nodes})
        module._codegen(state)
        if all(id(n) in state.starts for n in nodes):
            return state.starts
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {id(n): (positions[n].start.line, positions[n].start.column) for n in nodes}


# --------------------------------------------------------------------------------------------
# Walking libcst trees
#
# libcst's visitor protocol rebuilds every node it passes (it is made for transforms), which
# costs several times the parse on large files. Detection only reads, so it walks the node
# dataclasses' fields directly, in one pass per file.

_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(
            f.name for f in dataclasses.fields(node)
            if f.name not in ("leading_lines", "lines_after_decorators", "header", "footer")
            and not f.name.startswith(("whitespace", "lpar", "rpar"))
        )
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


# --------------------------------------------------------------------------------------------
# Per-file analysis


class _Imports:
    """Local names of a module mapped to dotted names (imports and top-level definitions)."""

    def __init__(self, module: str, is_package: bool):
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.names: dict[str, str] = {}

    def add_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                dotted = _dotted(alias.name)
                if dotted is None:
                    continue
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.names[alias.asname.name.value] = dotted
                else:
                    head = dotted.split(".")[0]
                    self.names[head] = head
            return
        base = _dotted(node.module) if node.module is not None else ""
        if node.relative:
            pkg = self.package.split(".") if self.package else []
            up = len(node.relative) - 1
            pkg = pkg[: len(pkg) - up] if up <= len(pkg) else []
            base = ".".join(p for p in [*pkg, base] if p)
        if isinstance(node.names, cst.ImportStar) or base is None:
            return
        for alias in node.names:
            name = _dotted(alias.name)
            if name is None:
                continue
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            self.names[local] = f"{base}.{name}" if base else name

    def resolve(self, expr: cst.BaseExpression) -> Optional[str]:
        if isinstance(expr, cst.Name):
            return self.names.get(expr.value)
        if isinstance(expr, cst.Attribute):
            head = self.resolve(expr.value)
            return f"{head}.{expr.attr.value}" if head else None
        return None

    def resolve_dotted(self, dotted: str) -> str:
        """A dotted name as written (``utils.helper``) with its first part resolved."""
        head, _, rest = dotted.partition(".")
        known = self.names.get(head)
        if known is None:
            return f"{self.module}.{dotted}" if self.module else dotted
        return f"{known}.{rest}" if rest else known


def _dotted(expr) -> Optional[str]:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr.value}" if head else None
    return None


def _is_tensor_annotation(ann: Optional[cst.Annotation], imports: _Imports) -> bool:
    if ann is None:
        return False
    node = ann.annotation
    # Optional[Tensor] / Union[Tensor, None] / Tensor | None: still a tensor when not None.
    if isinstance(node, cst.Subscript) and _dotted(node.value) in ("Optional", "typing.Optional", "Union", "typing.Union"):
        inner = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        return any(_is_tensor_expr(e, imports) for e in inner)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return _is_tensor_expr(node.left, imports) or _is_tensor_expr(node.right, imports)
    return _is_tensor_expr(node, imports)


def _is_tensor_expr(node: cst.BaseExpression, imports: _Imports) -> bool:
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value if isinstance(node.evaluated_value, str) else ""
        return text.split(".")[-1].endswith("Tensor") and text.startswith(("torch.", "Tensor"))
    name = imports.resolve(node) or _dotted(node) or ""
    return name.startswith("torch.") and name.endswith("Tensor")


def _only_raise(body: cst.BaseSuite) -> bool:
    """Whether an `if` body is nothing but a `raise` (the shape GM301 lowers)."""
    if isinstance(body, cst.SimpleStatementSuite):
        stmts = list(body.body)
        return len(stmts) == 1 and isinstance(stmts[0], cst.Raise)
    if isinstance(body, cst.IndentedBlock):
        stmts = list(body.body)
        return (
            len(stmts) == 1
            and isinstance(stmts[0], cst.SimpleStatementLine)
            and len(stmts[0].body) == 1
            and isinstance(stmts[0].body[0], cst.Raise)
        )
    return False


@dataclass
class _Binding:
    order: int  # walk order of the binding statement: earlier bindings have smaller numbers
    value: Optional[cst.BaseExpression]  # None: bound to something untraceable (loop variable ...)
    stmt: cst.CSTNode
    augmented: bool = False


@dataclass
class _Site:
    """A candidate found during the walk, turned into a GraphBreak once positions are known."""

    node: cst.CSTNode
    func: _Func
    cls: object  # graphmend.detect.classify.Classification
    gb: tuple
    reason: Callable[[], str]  # rendering source text is deferred until the site is kept
    at: Optional[cst.CSTNode] = None  # the binding statement the message cites, if any


class _Scope:
    """What the walk knows about one function body."""

    def __init__(self, func: _Func):
        self.func = func
        self.bindings: dict[str, list[_Binding]] = {}
        self.tensor_params: set[str] = set()
        self.local_names: set[str] = set()


class _FileScan:
    """One walk over a module: classes, functions, calls, compile wrappers and candidate sites."""

    def __init__(self, rel: str, text: str, module: cst.Module):
        self.rel = rel
        self.module = module
        self.lines = [line_text(line) for line in split_lines(text)]
        mod = module_name(rel)
        self.facts = FileFacts(rel=rel, module=mod)
        self.imports = _Imports(mod, rel.endswith("__init__.py"))
        self.logger_names: set[str] = set()
        self.elifs: set[int] = set()
        self.scope: list[tuple[str, str]] = []  # ("class" | "def", qualname), innermost last
        self.funcs: list[_Scope] = []  # the function bodies being walked, innermost last
        self.sites: list[_Site] = []
        self.reported_reads: set[int] = set()  # binding statements already reported as scalar reads
        self.raw_bases: dict[str, tuple[str, ...]] = {}
        self.raw_calls: list[tuple[_Func, str]] = []
        self.raw_compiled: list[str] = []
        self.order = 0
        self._prepare(module)

    # -- the walk -----------------------------------------------------------------------------

    def _prepare(self, module: cst.Module) -> None:
        """Module-level names first, so that a call can name a function defined further down."""
        for stmt in module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self.imports.names.setdefault(stmt.name.value, f"{self.facts.module}.{stmt.name.value}")
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self.imports.add_import(small)
                    elif isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
                        callee = _dotted(small.value.func) or ""
                        if callee.rsplit(".", 1)[-1] in ("getLogger", "get_logger"):
                            for t in small.targets:
                                if isinstance(t.target, cst.Name):
                                    self.logger_names.add(t.target.value)

    def run(self) -> FileFacts:
        self.walk(self.module)
        imports = self.imports
        for qual, bases in self.raw_bases.items():
            self.facts.classes[qual] = tuple(imports.resolve_dotted(b) for b in bases)
        for func, callee in self.raw_calls:
            func.calls.add(callee if callee.startswith(("self:", "super:")) else "ref:" + imports.resolve_dotted(callee))
        for ref in self.raw_compiled:
            self.facts.compiled_refs.add(imports.resolve_dotted(ref))
        if self.sites:
            self._finish_sites()
        return self.facts

    def walk(self, node: cst.CSTNode) -> None:
        self.order += 1
        handler = _HANDLERS.get(type(node))
        if handler is not None and handler(self, node) is False:
            return
        for child in _children(node):
            self.walk(child)

    def _qualname(self, name: str) -> str:
        if not self.scope:
            return name
        kind, parent = self.scope[-1]
        return f"{parent}.<locals>.{name}" if kind == "def" else f"{parent}.{name}"

    def on_import(self, node) -> bool:
        self.imports.add_import(node)
        return False

    def on_class(self, node: cst.ClassDef) -> bool:
        qual = self._qualname(node.name.value)
        self.raw_bases[qual] = tuple(
            d for d in (_dotted(a.value) for a in node.bases if a.keyword is None) if d
        )
        self.scope.append(("class", qual))
        saved, self.funcs = self.funcs, []  # a class body is not part of the enclosing function
        self.walk(node.body)
        self.funcs = saved
        self.scope.pop()
        return False

    def on_function(self, node: cst.FunctionDef) -> bool:
        qual = self._qualname(node.name.value)
        cls = self.scope[-1][1] if self.scope and self.scope[-1][0] == "class" else None
        parent = self.scope[-1][1] if self.scope and self.scope[-1][0] == "def" else None
        func = _Func(qualname=qual, cls=cls, parent=parent)
        for dec in node.decorators:
            target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            ref = self.imports.resolve(target) or ""
            if ref in COMPILE_FUNCS:
                func.compiled = True
            if ref in DISABLE_FUNCS:
                func.disabled = True
        self.facts.functions[qual] = func
        scope = _Scope(func)
        params = node.params
        for p in [*params.posonly_params, *params.params, *params.kwonly_params]:
            scope.local_names.add(p.name.value)
            if _is_tensor_annotation(p.annotation, self.imports):
                scope.tensor_params.add(p.name.value)
        for p in (params.star_arg, params.star_kwarg):
            if isinstance(p, cst.Param):
                scope.local_names.add(p.name.value)
        self.scope.append(("def", qual))
        self.funcs.append(scope)
        self.walk(node.body)
        self.funcs.pop()
        self.scope.pop()
        return False

    def on_lambda(self, node) -> bool:
        return False  # a lambda's body runs when called, somewhere we cannot see

    # bindings (the use-def trace reads them back in walk order)

    def _bind(self, target, stmt, value, augmented: bool = False) -> None:
        if not self.funcs:
            return
        scope = self.funcs[-1]
        if isinstance(target, cst.Name):
            scope.local_names.add(target.value)
            scope.bindings.setdefault(target.value, []).append(_Binding(self.order, value, stmt, augmented))
        elif isinstance(target, (cst.Tuple, cst.List)):
            # `vals, idx = x.max(-1)`: each element is taken to be what the whole value is.
            for el in target.elements:
                inner = el.value.value if isinstance(el.value, cst.StarredElement) else el.value
                self._bind(inner, stmt, value, augmented)

    def on_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node, node.value)

    def on_annassign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node, node.value)

    def on_augassign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node, node.value, augmented=True)

    def on_namedexpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node, node.value)

    def on_for(self, node: cst.For) -> None:
        self._bind(node.target, node, None)

    def on_withitem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, node, None)

    # calls, compile wrappers, side effects

    def on_call(self, node: cst.Call) -> None:
        f = node.func
        if (self.imports.resolve(f) or "") in COMPILE_FUNCS and node.args:
            # `fn = torch.compile(fn)`, `torch.compile(Model())`: the wrapped code is a region root.
            arg = node.args[0].value
            if isinstance(arg, cst.Call):
                inner = _dotted(arg.func)
                if inner:
                    self.raw_compiled.append(f"{inner}.forward")
            else:
                ref = _dotted(arg)
                if ref:
                    self.raw_compiled.append(ref)
        if not self.funcs:
            return
        func = self.funcs[-1].func
        if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value in ("self", "cls"):
            self.raw_calls.append((func, "self:" + f.attr.value))
        elif (
            isinstance(f, cst.Attribute)
            and isinstance(f.value, cst.Call)
            and isinstance(f.value.func, cst.Name)
            and f.value.func.value == "super"
        ):
            self.raw_calls.append((func, "super:" + f.attr.value))
        else:
            dotted = _dotted(f)
            if dotted and dotted.split(".")[0] not in self.funcs[-1].local_names:
                self.raw_calls.append((func, dotted))

    def on_expr(self, node: cst.Expr) -> None:
        if self.funcs and isinstance(node.value, cst.Call):
            self._side_effect(node.value)

    # branches

    def on_if(self, node: cst.If) -> bool:
        if isinstance(node.orelse, cst.If):
            self.elifs.add(id(node.orelse))
        if not self.funcs:
            return True
        guard = self._compiling_guard(node.test)
        if guard is not None:
            # `if torch.compiler.is_compiling(): A else: B`: only A is ever traced.
            branch = node.body if guard else node.orelse
            if branch is not None:
                self.walk(branch)
            return False
        ev = self._ev(node.test, self.order)
        if ev is not None:
            keyword = "`elif`" if id(node) in self.elifs else "`if`"
            self._branch_site(node, ev, keyword, raises=_only_raise(node.body))
        return True

    def on_ifexp(self, node: cst.IfExp) -> None:
        if not self.funcs:
            return
        ev = self._ev(node.test, self.order)
        if ev is not None:
            self._branch_site(node, ev, "a conditional expression", raises=False)

    def _compiling_guard(self, test: cst.BaseExpression) -> Optional[bool]:
        """True for `is_compiling()`, False for `not is_compiling()`, None for anything else."""
        negated = False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            negated, test = True, test.expression
        if isinstance(test, cst.Call) and not test.args:
            name = self.imports.resolve(test.func) or _dotted(test.func) or ""
            if name in COMPILING_GUARDS or name.rsplit(".", 1)[-1] == "is_torchdynamo_compiling":
                return not negated
        return None

    # -- evidence -----------------------------------------------------------------------------

    def _name_ev(self, name: str, before: int, depth: int) -> Optional[_Ev]:
        scope = self.funcs[-1]
        earlier = [b for b in scope.bindings.get(name, ()) if b.order < before]
        if earlier:
            b = earlier[-1]
            if b.value is None or depth <= 0:
                return None
            ev = self._ev(b.value, b.order, depth - 1)
            if b.augmented:
                ev = _combine(ev, self._name_ev(name, b.order, depth - 1))
            if ev is None:
                return None
            if ev.via is not None:  # already traced further back: keep the binding nearest the value
                return ev
            return _Ev(ev.kind, b.value, name, b.stmt)
        if name in scope.tensor_params:
            return _Ev(_TENSOR, cst.Name(name))
        return None

    def _ev(self, node: cst.BaseExpression, at: int, depth: int = MAX_TRACE) -> Optional[_Ev]:
        """Evidence that ``node`` is tensor data (or a scalar read from it), or None."""
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return None
            return self._name_ev(node.value, at, depth)
        if isinstance(node, cst.Attribute):
            if node.attr.value in PASS_ATTRS:
                return self._ev(node.value, at, depth)
            return None
        if isinstance(node, cst.Call):
            return self._call_ev(node, at, depth)
        if isinstance(node, cst.Subscript):
            return self._ev(node.value, at, depth)
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            return _combine(self._ev(node.left, at, depth), self._ev(node.right, at, depth))
        if isinstance(node, cst.UnaryOperation):
            return self._ev(node.expression, at, depth)
        if isinstance(node, cst.Comparison):
            evs = [self._ev(node.left, at, depth)]
            for target in node.comparisons:
                # `x is None` compares identities: it never reads tensor data.
                if isinstance(target.operator, (cst.Is, cst.IsNot)):
                    return None
                evs.append(self._ev(target.comparator, at, depth))
            return _combine(*evs)
        if isinstance(node, cst.IfExp):
            return _combine(self._ev(node.body, at, depth), self._ev(node.orelse, at, depth))
        if isinstance(node, cst.NamedExpr):
            return self._ev(node.value, at, depth)
        if isinstance(node, (cst.GeneratorExp, cst.ListComp)):
            return self._ev(node.elt, at, depth)
        return None

    def _call_ev(self, node: cst.Call, at: int, depth: int) -> Optional[_Ev]:
        func = node.func
        resolved = self.imports.resolve(func)
        if resolved and resolved.startswith("torch."):
            if resolved in DATA_OP_FUNCS:
                return _Ev(_DATA_OP, node)
            if resolved in VALUE_FUNCS:
                return _Ev(_TENSOR, node)
            if resolved in NON_TENSOR_TORCH or resolved.startswith(NON_TENSOR_TORCH_PREFIXES):
                return None
            last = resolved.rsplit(".", 1)[-1]
            if last.startswith(("is_", "get_", "set_", "_")) or last[:1].isupper():
                return None
            # Any other torch function returns a tensor: `if torch.relu(x) > 0` reads its data.
            return _Ev(_TENSOR, node)
        local_names = self.funcs[-1].local_names
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if resolved is not None:  # a function of some imported module, not a tensor method
                return None
            if method in DATA_OP_METHODS:
                return _Ev(_DATA_OP, node)
            if method in SCALAR_METHODS or method in VALUE_METHODS:
                # NumPy arrays have `.max()` and `.item()` too, and reading them is no graph break.
                if self._numpy_origin(func.value, at, depth):
                    return None
                return _Ev(_SCALAR if method in SCALAR_METHODS else _TENSOR, node)
            if method in META_METHODS:
                return None
            # A method of a tensor (`x.float()`, `mask.eq(0)`) is a tensor too.
            return self._ev(func.value, at, depth)
        if isinstance(func, cst.Name) and func.value not in local_names:
            name = func.value
            if name in BENIGN_BUILTINS:
                return None
            args = _combine(*(self._ev(a.value, at, depth) for a in node.args))
            if name in SCALAR_BUILTINS and args is not None:
                return _Ev(_SCALAR, node)
            if name in REDUCING_BUILTINS:
                return args
        return None

    def _numpy_origin(self, node: cst.BaseExpression, at: int, depth: int) -> bool:
        """Whether ``node`` is traced back to a NumPy call (``np.array(...)``, ``a.reshape(...)``)."""
        if depth < 0:
            return False
        if isinstance(node, cst.Call):
            resolved = self.imports.resolve(node.func)
            if resolved is not None:
                return resolved.startswith("numpy.")
            if isinstance(node.func, cst.Attribute):
                return self._numpy_origin(node.func.value, at, depth)
            return False
        if isinstance(node, cst.Name):
            earlier = [b for b in self.funcs[-1].bindings.get(node.value, ()) if b.order < at]
            if earlier and earlier[-1].value is not None:
                return self._numpy_origin(earlier[-1].value, earlier[-1].order, depth - 1)
            return False
        if isinstance(node, cst.BinaryOperation):
            return self._numpy_origin(node.left, at, depth) or self._numpy_origin(node.right, at, depth)
        if isinstance(node, (cst.Subscript, cst.Attribute)):
            return self._numpy_origin(node.value, at, depth)
        return False

    # -- sites ----------------------------------------------------------------------------------

    def _code(self, node: cst.CSTNode) -> str:
        return _short(self.module.code_for_node(node))

    def _branch_site(self, node: cst.CSTNode, ev: _Ev, keyword: str, raises: bool) -> None:
        if ev.at is not None and (ev.kind == _SCALAR or (ev.kind == _DATA_OP and not raises)):
            # `n = x.sum().item()` ... `if n > 3:`: Dynamo breaks at the read, and the `if` then
            # tests a plain Python value. Report the read, once however many tests use it.
            if id(ev.at) in self.reported_reads:
                return
            self.reported_reads.add(id(ev.at))
            node, keyword = ev.at, None

        def what() -> str:
            text = self._code(ev.node)
            if ev.via:
                return f"`{ev.via} = {text}` at line {self._line_of(ev.at)}"
            return f"`{text}`"

        where = f"in {_REGION}"
        if ev.kind == _SCALAR:
            # Only `.item()` was observed to give GB0124; `.tolist()` gives an id that depends on the dtype.
            item = _is_item_call(ev.node)
            gb = _gb(GB_ITEM) if item else (None, None, None)
            cls = _classify.classify(GB_ITEM[1] if gb[0] else "Tensor.tolist()", "config.capture_scalar_outputs" if gb[0] else "")
            reason = lambda: (  # noqa: E731
                f"{keyword} on a Python scalar read from a tensor ({what()}) {where}: the read leaves the graph "
                f"and GM101 cannot predicate a Python value"
                if keyword
                else f"a Python scalar read from a tensor (`{self._code(ev.node)}`) {where} feeds an `if`: "
                f"the read leaves the graph and GM101 cannot predicate a Python value"
            )
        elif ev.kind == _DATA_OP:
            gb = _gb(GB_DATA_OP)
            if raises:
                cls = _classify.classify(GB_BRANCH[1], statement=_classify.STMT_IF_RAISE)
                reason = lambda: (  # noqa: E731
                    f"`raise` under a data-dependent check ({what()}) {where}: Dynamo cannot compute a Python bool "
                    f"from data; GM301 can lower it to torch._assert_async"
                )
            else:
                cls = _classify.classify(GB_DATA_OP[1])
                reason = lambda: (  # noqa: E731
                    f"{keyword} on a Python bool computed from tensor data ({what()}) {where}: Dynamo cannot trace "
                    f"it and GM101 cannot predicate a Python bool"
                    if keyword
                    else f"a Python bool computed from tensor data (`{self._code(ev.node)}`) {where} feeds an `if`: "
                    f"Dynamo cannot trace it and GM101 cannot predicate a Python bool"
                )
        else:
            gb = _gb(GB_BRANCH)
            if raises:
                cls = _classify.classify(GB_BRANCH[1], statement=_classify.STMT_IF_RAISE)
                reason = lambda: (  # noqa: E731
                    f"`raise` under a tensor condition ({what()}) {where}: Dynamo cannot branch on data; "
                    f"GM301 can lower it to torch._assert_async"
                )
            else:
                cls = _classify.classify(GB_BRANCH[1], statement=_classify.STMT_IF)
                reason = lambda: (  # noqa: E731
                    f"{keyword} on a tensor value ({what()}) {where}: Dynamo cannot branch on data; "
                    f"GM101 can predicate it with torch.where"
                )
        self.sites.append(_Site(node, self.funcs[-1].func, cls, gb, reason, ev.at))

    def _side_effect(self, call: cst.Call) -> None:
        func = call.func
        scope = self.funcs[-1]
        resolved = self.imports.resolve(func)
        if isinstance(func, cst.Name) and func.value == "print":
            if "print" in scope.local_names or "print" in self.imports.names:
                return
            gb = _gb(GB_PRINT)
            cls = _classify.classify(GB_PRINT[1], "builtin operator `print`")
            reason = f"`print` in {_REGION}: Dynamo cannot trace it; GM201 can defer it out of the graph"
            self.sites.append(_Site(call, scope.func, cls, gb, lambda: reason))
            return
        if resolved in ("warnings.warn", "warnings.warn_explicit"):
            gb = _gb(GB_WARN)
            cls = _classify.classify(GB_WARN[1], "`_warnings.warn`")
            reason = f"`warnings.warn` in {_REGION}: Dynamo cannot trace it; GM203 can defer it out of the graph"
            self.sites.append(_Site(call, scope.func, cls, gb, lambda: reason))
            return
        if not isinstance(func, cst.Attribute) or func.attr.value not in LOG_METHODS:
            return
        method = func.attr.value
        receiver = func.value
        if resolved is not None and resolved.startswith("logging."):
            # logging.warning(...) breaks inside the logging module, where the id is not ours to say.
            gb: tuple = (None, None, None)
            label = f"logging.{method}"
        elif self._is_logger(receiver):
            gb = _gb(GB_LOGGER)
            label = f"{_dotted(receiver)}.{method}"
        else:
            return
        cls = _classify.classify(GB_LOGGER[1])
        reason = f"`{label}` in {_REGION}: Dynamo cannot trace logging calls; GM202 can defer it out of the graph"
        self.sites.append(_Site(call, scope.func, cls, gb, lambda: reason))

    def _is_logger(self, receiver: cst.BaseExpression) -> bool:
        if isinstance(receiver, cst.Name):
            return receiver.value in LOGGER_NAMES or receiver.value in self.logger_names
        if isinstance(receiver, cst.Attribute) and isinstance(receiver.value, cst.Name) and receiver.value.value in ("self", "cls"):
            return receiver.attr.value in LOGGER_NAMES
        return False

    # -- positions ----------------------------------------------------------------------------

    def _line_of(self, node: Optional[cst.CSTNode]) -> int:
        return self.starts[id(node)][0] if node is not None and id(node) in self.starts else 0

    def _finish_sites(self) -> None:
        # Positions cost a code generation pass over the module: only files with sites pay it.
        wanted = [s.node for s in self.sites]
        wanted += [s.at for s in self.sites if s.at is not None]
        self.starts = _node_starts(self.module, wanted)
        occurrences: dict[tuple[str, str, str], int] = {}
        ordered = sorted(self.sites, key=lambda s: self.starts[id(s.node)])
        for site in ordered:
            line, column = self.starts[id(site.node)]
            start = cst.metadata.CodePosition(line, column)
            line_text = self.lines[start.line - 1] if start.line - 1 < len(self.lines) else ""
            if suppressed(line_text, site.cls.rule):
                continue
            source = line_text.strip()
            qual = site.func.qualname
            key = (qual, site.cls.category.value, " ".join(source.split()))
            occurrence = occurrences.get(key, 0)
            occurrences[key] = occurrence + 1
            site.func.candidates.append(
                GraphBreak(
                    file=self.rel,
                    line=start.line,
                    col=start.column,
                    reason=site.reason(),
                    category=site.cls.category,
                    source_line=source,
                    function=qual,
                    gb_id=site.gb[0],
                    gb_type=site.gb[1],
                    doc_url=site.gb[2],
                    fixable=site.cls.fixable,
                    rule=site.cls.rule,
                    lever=site.cls.lever,
                    lever_reason=site.cls.lever_reason,
                    fingerprint=fingerprint(self.rel, qual, site.cls.category.value, source, occurrence),
                    verified=False,
                )
            )


def _is_item_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "item"


_HANDLERS = {
    cst.Import: _FileScan.on_import,
    cst.ImportFrom: _FileScan.on_import,
    cst.ClassDef: _FileScan.on_class,
    cst.FunctionDef: _FileScan.on_function,
    cst.Lambda: _FileScan.on_lambda,
    cst.Assign: _FileScan.on_assign,
    cst.AnnAssign: _FileScan.on_annassign,
    cst.AugAssign: _FileScan.on_augassign,
    cst.NamedExpr: _FileScan.on_namedexpr,
    cst.For: _FileScan.on_for,
    cst.WithItem: _FileScan.on_withitem,
    cst.Call: _FileScan.on_call,
    cst.Expr: _FileScan.on_expr,
    cst.If: _FileScan.on_if,
    cst.IfExp: _FileScan.on_ifexp,
}


def analyze_source(text: str, rel: str) -> FileFacts:
    """The facts of one file; raises ``libcst.ParserSyntaxError`` on a syntax error."""
    module = cst.parse_module(text)
    return _FileScan(rel, text, module).run()


def _syntax_message(exc: Exception) -> str:
    if isinstance(exc, cst.ParserSyntaxError):
        first = str(exc.message).strip().splitlines()[0] if str(exc.message).strip() else "invalid syntax"
        return f"syntax error at line {exc.raw_line}, column {exc.raw_column + 1}: {first}"
    return f"cannot be parsed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _analyze_job(job: tuple[str, str]) -> tuple[Optional[FileFacts], Optional[FileError]]:
    rel, text = job
    try:
        return analyze_source(text, rel), None
    except cst.ParserSyntaxError as exc:
        # Python's own parser names the cause better ("'(' was never closed" at the right line);
        # libcst's message is kept for code Python accepts but libcst does not.
        try:
            ast.parse(text, filename=rel)
        except SyntaxError as py_exc:
            where = f"line {py_exc.lineno}" + (f", column {py_exc.offset}" if py_exc.offset else "")
            return None, FileError(rel, f"syntax error at {where}: {py_exc.msg}")
        except (ValueError, RecursionError, MemoryError):
            pass
        return None, FileError(rel, _syntax_message(exc))
    except RecursionError:
        return None, FileError(rel, "cannot be parsed: nesting too deep")
    except Exception as exc:  # one broken file must not stop the run
        return None, FileError(rel, _syntax_message(exc))


# --------------------------------------------------------------------------------------------
# Whole-repository step


class _Index:
    """Classes and functions of all scanned files, by dotted name (and by dotted suffix, for
    imports written relative to a folder other than the repository root)."""

    def __init__(self, facts: Sequence[FileFacts]):
        self.funcs: dict[str, tuple[FileFacts, _Func]] = {}
        self.classes: dict[str, tuple[FileFacts, str]] = {}
        self._func_suffix: dict[str, list[str]] = {}
        self._class_suffix: dict[str, list[str]] = {}
        for ff in facts:
            for qual, fn in ff.functions.items():
                key = f"{ff.module}.{qual}" if ff.module else qual
                self.funcs[key] = (ff, fn)
                _add_suffixes(self._func_suffix, key)
            for qual in ff.classes:
                key = f"{ff.module}.{qual}" if ff.module else qual
                self.classes[key] = (ff, qual)
                _add_suffixes(self._class_suffix, key)

    def func(self, ref: str) -> Optional[str]:
        if ref in self.funcs:
            return ref
        hits = self._func_suffix.get(ref, [])
        return hits[0] if len(hits) == 1 else None

    def cls(self, ref: str) -> Optional[str]:
        if ref in self.classes:
            return ref
        hits = self._class_suffix.get(ref, [])
        return hits[0] if len(hits) == 1 else None


def _add_suffixes(table: dict[str, list[str]], key: str) -> None:
    parts = key.split(".")
    for i in range(1, len(parts) - 1):
        table.setdefault(".".join(parts[i:]), []).append(key)


def _module_classes(index: _Index) -> set[str]:
    """Dotted names of the scanned classes that subclass ``torch.nn.Module`` (fixpoint)."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for key, (ff, qual) in index.classes.items():
            if key in found:
                continue
            for base in ff.classes[qual]:
                last = base.rsplit(".", 1)[-1]
                local = index.cls(base) or index.cls(f"{ff.module}.{base}")
                if (
                    (base.startswith("torch.nn.") and last[:1].isupper())
                    or last.endswith(MODULE_BASE_SUFFIXES)
                    or (local is not None and local in found)
                ):
                    found.add(key)
                    changed = True
                    break
    return found


def _resolve_regions(facts: Sequence[FileFacts]) -> list[GraphBreak]:
    index = _Index(facts)
    modules = _module_classes(index)

    def method(cls_key: str, name: str, seen: Optional[set[str]] = None) -> Optional[str]:
        """The function a `self.name()` call in class ``cls_key`` runs (own class, then bases)."""
        seen = seen or set()
        if cls_key in seen or cls_key not in index.classes:
            return None
        seen.add(cls_key)
        ff, qual = index.classes[cls_key]
        key = f"{cls_key}.{name}"
        if key in index.funcs:
            return key
        for base in ff.classes[qual]:
            base_key = index.cls(base) or index.cls(f"{ff.module}.{base}")
            if base_key:
                hit = method(base_key, name, seen)
                if hit:
                    return hit
        return None

    roots: list[str] = []
    for cls_key in sorted(modules):
        fwd = f"{cls_key}.forward"
        if fwd in index.funcs:
            roots.append(fwd)
    for key, (ff, fn) in index.funcs.items():
        if fn.compiled:
            roots.append(key)
    for ff in facts:
        for ref in ff.compiled_refs:
            hit = index.func(ref)
            if hit is None and ref.endswith(".forward"):
                cls_key = index.cls(ref[: -len(".forward")])
                hit = method(cls_key, "forward") if cls_key else None
            if hit:
                roots.append(hit)

    reached: dict[str, str] = {}  # function key -> the root it was first reached from
    queue: deque[str] = deque()
    for r in roots:
        if r not in reached and not index.funcs[r][1].disabled:
            reached[r] = r
            queue.append(r)
    children: dict[str, list[str]] = {}
    for key, (ff, fn) in index.funcs.items():
        if fn.parent:
            parent_key = f"{ff.module}.{fn.parent}" if ff.module else fn.parent
            children.setdefault(parent_key, []).append(key)
    while queue:
        key = queue.popleft()
        ff, fn = index.funcs[key]
        cls_key = f"{ff.module}.{fn.cls}" if fn.cls and ff.module else fn.cls
        targets: list[Optional[str]] = list(children.get(key, []))
        for call in sorted(fn.calls):
            kind, _, name = call.partition(":")
            if kind == "self" and cls_key:
                targets.append(method(cls_key, name))
            elif kind == "super" and cls_key and cls_key in index.classes:
                bff, bqual = index.classes[cls_key]
                for base in bff.classes[bqual]:
                    base_key = index.cls(base) or index.cls(f"{bff.module}.{base}")
                    if base_key:
                        targets.append(method(base_key, name))
            elif kind == "ref":
                targets.append(index.func(name))
        for t in targets:
            if t and t not in reached and not index.funcs[t][1].disabled:
                reached[t] = reached[key]
                queue.append(t)

    breaks: list[GraphBreak] = []
    for key, root in reached.items():
        ff, fn = index.funcs[key]
        root_fn = index.funcs[root][1].qualname
        region = f"a compiled region (`{root_fn}`)" if root == key else f"a compiled region (reached from `{root_fn}`)"
        for b in fn.candidates:
            breaks.append(dataclasses.replace(b, reason=b.reason.replace(_REGION, region)))
    return breaks


# --------------------------------------------------------------------------------------------
# Entry point


def _all_files(config: Config) -> list[str]:
    root = config.root
    found: set[str] = set()
    for start in config.paths:
        for rel in iter_python_files(root, start):
            if config.is_in_paths(rel):
                found.add(rel)
    return sorted(found)


def _restriction(config: Config, files: Iterable[str]) -> tuple[list[str], list[FileError]]:
    """``files`` as repo-relative paths (files or folders); missing ones become errors."""
    root = config.root
    wanted: list[str] = []
    errors: list[FileError] = []
    for item in files:
        path = Path(item)
        rel = path.as_posix()
        if path.is_absolute():
            try:
                rel = Path(os.path.abspath(path)).relative_to(root).as_posix()
            except ValueError:
                errors.append(FileError(str(item), "outside the repository"))
                continue
        rel = rel.strip("/")
        while rel.startswith("./"):
            rel = rel[2:]
        rel = rel or "."
        if not os.path.lexists(root / rel):
            errors.append(FileError(rel, "no such file or directory"))
            continue
        wanted.append(rel)
    return wanted, errors


_RESTRICTION_MESSAGES = ("outside the repository", "no such file or directory")


def _within(rel: str, wanted: Sequence[str]) -> bool:
    return any(w == "." or rel == w or rel.startswith(w.rstrip("/") + "/") for w in wanted)


def detect_static(config: Config, files: Optional[Iterable[str]] = None, *, jobs: Optional[int] = None) -> StaticResult:
    """Static candidates in ``config.paths`` (restricted to ``files``: repo-relative paths or
    folders). Unusable files become ``FileError``s and the run goes on."""
    # Regions are resolved over every file in `paths` (a helper in the named file may only be
    # reachable from a forward elsewhere); `files` narrows what is reported.
    selected = _all_files(config)
    errors: list[FileError] = []
    wanted: Optional[list[str]] = None
    if files is not None:
        wanted, errors = _restriction(config, files)
    texts: list[tuple[str, str]] = []
    for rel in selected:
        try:
            text = read_source(config.root, rel)
        except SourceError as exc:
            errors.append(FileError(exc.path, exc.cause))
            continue
        # TorchFix's habit: a file that never says "torch" cannot hold a compiled region.
        if "torch" in text:
            texts.append((rel, text))

    results: list[tuple[Optional[FileFacts], Optional[FileError]]]
    workers = jobs if jobs is not None else min(os.cpu_count() or 1, 8)
    if len(texts) > PARALLEL_MIN_FILES and workers > 1:
        # fork is cheap, but forking a process that already runs torch's threads can hang.
        method = "spawn" if "torch" in sys.modules else "fork"
        ctx = multiprocessing.get_context(method)
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = list(pool.map(_analyze_job, texts, chunksize=max(1, len(texts) // (workers * 4))))
    else:
        results = [_analyze_job(job) for job in texts]

    facts = [f for f, _ in results if f is not None]
    errors.extend(e for _, e in results if e is not None)
    breaks = _resolve_regions(facts)
    if wanted is not None:
        breaks = [b for b in breaks if _within(b.file, wanted)]
        errors = [e for e in errors if e.message in _RESTRICTION_MESSAGES or _within(e.path, wanted)]
        selected = [rel for rel in selected if _within(rel, wanted)]
    breaks.sort(key=lambda b: (b.file, b.line, b.col or 0, b.rule or "", b.category.value))
    errors.sort(key=lambda e: (e.path, e.message))
    return StaticResult(
        breaks=tuple(breaks), errors=tuple(errors), files_scanned=len(selected),
        files_parsed=len(texts),
    )
