"""A deferred call's boundary in ANOTHER file of the package: the compiled entries that reach it.

A ``warnings.warn`` in a mixin or utility file (transformers' ``ModuleUtilsMixin`` in
``modeling_utils.py``) has no ``forward`` of its own file to replay it: the model's ``forward``
that calls it lives in another file. In dynamic mode Dynamo reports the user stack of each break,
outermost first; the outermost ``forward`` on it, of a module class defined in the repository, is
the compiled entry. The call is recorded only under such entries (``entries=``), and only where
every frame between the entry and the call was read and shown to be safe:

* every frame is in a file of the repository (torch's own ``nn.Module`` plumbing excepted), so the
  code that runs after the call is known;
* in every frame's file, nothing may fail after the call in the same compiled graph (the checks
  the same-file case makes: a tensor-valued check that may be lowered, an index held in a tensor,
  in the frame's function and in the methods of the classes that may be in the graph with it) —
  the records of a graph that fails are lost — nor while Dynamo traces it, unless the runtime
  makes the call from the failed trace (:func:`shown_from_trace`: ``print``, ``warnings.warn``, a
  ``logging.<level>`` function, a method of a logger ``logging.getLogger`` returns, with constants
  and sizes only): a tensor operation whose shapes or
  dtypes may not fit (``y + mask``, ``self.proj(y)``, ``y.view(7)``, ``y[0]``) fails the trace
  itself, before any op of the graph runs, so a record, or a call given a tensor, is lost with it
  (:func:`_trace_fault`; Python-level errors while tracing, a ``KeyError`` or an
  ``AttributeError``, make Dynamo run the frame eagerly, where the call runs as written);
* a call the op makes in the graph (:func:`shown_from_trace`: arguments constants or sizes) is
  made before whatever fails after it, when the graph runs or while Dynamo traces it, so neither
  counts, provided no record is made before it in the region (the runtime records a call after a
  record, to keep the order, and the records of a failed graph are lost): the code before the
  call in every frame, and what it calls, is read and makes none (:func:`_record_before`);
* where the class of ``self`` is known exactly (the entry's ``forward``, the outermost frame: the
  runtime names the entry by ``type(self)``; the methods it calls on ``self``),
  ``self.<method>(...)`` is followed into the file of the package that defines it, found as
  Python's lookup does (:mod:`_mro`), and a function imported from a file of the package into
  its own file; what cannot be resolved stays code not read;
* no frame's function makes an output of its own (``print``, logging, ``warnings``,
  ``sys.stdout.write``): that file is not rewritten, so its output would stay immediate and
  appear before the deferred one although it came after it;
* the entry's file and the call's file are in one package (every folder from their common folder
  down has ``__init__.py``), so the entry's module name can be written relative to ``__name__``.

The runtime makes a module class of the package that derives from a module class of the
rewritten file a boundary when it is defined (``_graphmend_adopt_subclasses``); under any entry
not named (another model calling the same mixin method, a wrapper compiled around the model, a
subclass) the call runs as written and breaks the graph as before.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Optional, Union

import libcst as cst

from graphmend.model import Frame
from graphmend.transforms._analysis import PURE_METHODS
from graphmend.transforms import _boundary as B
from graphmend.transforms import _region as R
from graphmend.transforms.base import RuleContext, SourceError, SourceFile, iter_nodes

# Frames of torch's own module call plumbing, between a forward and the method it calls.
_PLUMBING = ("_call_impl", "_wrapped_call_impl", "__call__", "inner")


def foreign_entries(source: SourceFile, call: cst.Call, ctx: RuleContext,
                    shown: bool = False) -> Union[tuple[tuple[str, ...], bool], str]:
    """The entries (as ``entries=`` expressions) of other files a deferred ``call`` may be recorded
    under, and whether what may fail on values after it is no reason under any of them; or why
    there are none. ``shown``: the runtime makes the call in the graph and from a failed trace
    (:func:`shown_from_trace`), so a failure while tracing after it is no reason, nor one on
    values under a stack where no record may be made before it (:func:`_record_before`)."""
    if ctx.root is None:
        return "no compiled entry of another file is known (static mode: no stack from a real run)"
    lines = range(source.line(call), source.end_line(call) + 1)
    stacks = [stack for line, stack in ctx.stacks if line in lines]
    if not stacks:
        return "Dynamo reported no stack for the call, so its compiled entry is not known"
    entries: list[str] = []
    reasons: list[str] = []
    follow = _Follow(ctx.root, {source.path: source})
    waived = shown
    for stack in stacks:
        found = _entry_of(source, call, stack, follow, shown)
        if isinstance(found, str):
            # Every stack must pass: the runtime knows the entry, not the path through it, and a
            # stack that fails may run under an entry another stack names (the same forward calling
            # the helper twice, an index that can fail between the calls).
            reasons.append(found)
            continue
        waived = waived and found[1]
        if found[0] not in entries:
            entries.append(found[0])
    return reasons[0] if reasons else (tuple(sorted(entries)), waived)


def _entry_of(source: SourceFile, call: cst.Call, stack: tuple[Frame, ...], follow: "_Follow",
              shown: bool = False) -> Union[str, tuple[str, bool]]:
    """(the entry expression, whether failures on values are no reason) for one stack through the
    call, or why it cannot be named.

    The class of ``self`` is known exactly in the entry's ``forward`` when it is the outermost
    frame (the runtime names the entry by ``type(self)``), and in each frame it calls as
    ``self.<method>(...)``: there ``self.<name>(...)`` runs the method Python's lookup finds in the
    class's bases, in whichever file of the package defines it (:mod:`_mro`), and is followed."""
    frames = [f for f in stack if f.inside_repo or not _plumbing(f)]
    if not frames or frames[-1].file != source.path:
        return "the stack Dynamo reported does not end at the call"
    callers = frames[:-1]
    outside = next((f for f in callers if not f.inside_repo), None)
    if outside is not None:
        return (f"the compiled entry reaches the call through {outside.function}() outside the repository, whose "
                "code after the call was not read")
    entry: Optional[tuple[SourceFile, cst.ClassDef]] = None
    read: list[tuple[Frame, SourceFile, cst.Call]] = []
    for frame in callers:
        other = follow.read(frame.file)
        if isinstance(other, str):
            return other
        site = _call_at(other, frame)
        if site is None:
            return f"no call at {frame.file}:{frame.line} in {frame.function}() to follow"
        read.append((frame, other, site))
        cls = B._enclosing_class(other, site)
        if entry is None and frame.function == "forward" and cls is not None \
                and cls.name.value in B.module_classes_with_forward(other) and other.parent(cls) is other.module:
            entry = (other, cls)
    if entry is None:
        return "no forward of a module class of the repository is on the stack above the call (no entry to name)"
    # self's class in each frame (None where not known), the call's own frame last
    selves: list[Optional[tuple[str, str]]] = []
    known = (entry[0].path, entry[1].name.value) if read[0][1] is entry[0] and read[0][0].function == "forward" \
        and B._enclosing_class(entry[0], read[0][2]) is entry[1] else None
    for k, (frame, other, site) in enumerate(read):
        selves.append(known)
        callee = frames[k + 1].function
        if not (isinstance(site.func, cst.Attribute) and isinstance(site.func.value, cst.Name)
                and site.func.value.value == "self" and site.func.attr.value == callee):
            known = None
    selves.append(known)
    values = True
    if shown:
        # Made in the graph by the op unless a record came before it in the region (the call
        # after a record is recorded too, to keep the order): then a failure on values loses it.
        before = None
        for (frame, other, site), self_type in zip([*read, (frames[-1], source, call)], selves):
            before = before or _record_before(follow, other, site, self_type, frame)
        values = before is not None
    for (frame, other, site), self_type in zip(read, selves):
        func = B.enclosing_function(other, site)
        where = f"{frame.file}:{frame.line}"
        reason = failure_after(other, site, not shown, values, follow, self_type)
        if reason:
            return f"under the entry calling it at {where}: {reason}" + (f" ({before})" if shown and values else "")
        output = _output_in(other, func)
        if output:
            return (f"{frame.function}() at {where} makes output of its own ({output}), which would stay immediate and "
                    "appear before the deferred call's although it came after it")
    name = _relative_name(source.path, entry[0].path, follow.root)
    if name is None:
        return (f"{entry[0].path} and {source.path} are not in one package (a folder between them has no "
                "__init__.py), so the entry's module cannot be named from the call's")
    levels, module = name
    return f"__name__.rsplit('.', {levels})[0] + {'.' + module + '.' + entry[1].name.value!r}", not values


def _plumbing(frame: Frame) -> bool:
    parts = PurePosixPath(frame.file.replace("\\", "/")).parts
    return "torch" in parts and frame.function in _PLUMBING


def module_file(path: str, module: str, root: str, level: int = 0) -> Optional[str]:
    """The file (relative to ``root``) of ``module`` imported by the file at ``path``: relative to
    its folder (``level`` dots), or, for an absolute import, from the folder its top package is in
    (the first folder up without ``__init__.py``) or the root; or None."""
    parts = module.split(".") if module else []
    here = PurePosixPath(path.replace("\\", "/")).parent
    if level:
        for _ in range(level - 1):
            here = here.parent
        bases = [here]
    else:
        top = next((p for p in (here, *here.parents) if not (Path(root) / p / "__init__.py").is_file()), PurePosixPath("."))
        bases = [top] if top == PurePosixPath(".") else [top, PurePosixPath(".")]
    for base in bases:
        folder = base.joinpath(*parts)
        for candidate in ((folder.with_suffix(".py"),) if parts else ()) + (folder / "__init__.py",):
            if (Path(root) / candidate).is_file():
                return str(candidate)
    return None


def _read(root: str, rel: str, cache: dict) -> Union[SourceFile, str]:
    """The file ``rel`` of the repository parsed (once per ``cache``), or why it cannot be read."""
    if rel not in cache:
        from graphmend.sources import SourceError as ReadError, read_source

        try:
            cache[rel] = SourceFile(rel, read_source(root, rel))
        except (ReadError, SourceError, OSError, ValueError) as exc:
            cache[rel] = f"{rel}, which calls into this file, cannot be read: {exc}"
    return cache[rel]


class _Follow:
    """The files of the repository read while following a compiled entry's code (each parsed
    once), their programs, and the package's class hierarchy (:class:`_mro.Hierarchy`)."""

    def __init__(self, root: str, cache: dict):
        from graphmend.transforms._mro import Hierarchy

        self.root = root
        self.cache: dict[str, Union[SourceFile, str]] = dict(cache)
        self.programs: dict[str, object] = {}
        self.hierarchy = Hierarchy(root, self.read)

    def read(self, rel: str) -> Union[SourceFile, str]:
        return _read(self.root, rel, self.cache)

    def program(self, source: SourceFile):
        from graphmend.transforms._reach import _Program

        if source.path not in self.programs:
            self.programs[source.path] = _Program(source)
        return self.programs[source.path]


def _call_at(source: SourceFile, frame: Frame) -> Optional[cst.Call]:
    """The call the frame is suspended in: on its line, inside its function."""
    for call in iter_nodes(source.module, (cst.Call,)):
        if B.call_line(source, call) != frame.line:
            continue
        func = B.enclosing_function(source, call)
        if func is not None and func.name.value == frame.function:
            return call
    return None


def _output_in(source: SourceFile, func: Optional[cst.FunctionDef]) -> Optional[str]:
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms._deferral import _is_output

    for call in iter_nodes(func, (cst.Call,)) if func is not None else ():
        name = dotted(call.func)
        if _is_output(call) or name.split(".")[-2:] in (["stdout", "write"], ["stderr", "write"]):
            return f"`{name or source.code(call.func)}(...)` at line {source.line(call)}"
    return None


def _relative_name(here: str, there: str, root: str) -> Optional[tuple[int, str]]:
    """``there``'s module name relative to ``here``'s: (k, "sub.module") for
    ``__name__.rsplit(".", k)[0] + ".sub.module"``, or None when the two are not in one package."""
    import os

    a, b = PurePosixPath(here).parent.parts, PurePosixPath(there).parent.parts
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == 0:
        return None
    folders = {a[:n] for n in range(common, len(a) + 1)} | {b[:n] for n in range(common, len(b) + 1)}
    if not all(os.path.isfile(os.path.join(root, *f, "__init__.py")) for f in folders):
        return None
    return len(a) - common + 1, ".".join((*b[common:], PurePosixPath(there).stem))


# nn modules whose call indexes a table with the values it is given (an id out of range fails).
_LOOKUP_MODULES = ("Embedding", "EmbeddingBag")

# What runs after a deferred call and may fail there: calls, subscripts, operators.
_AFTER = (cst.Call, cst.Subscript, cst.BinaryOperation, cst.Comparison)

# Tensor methods (``x.sin()``) and torch functions (``torch.sin(x)``) that, given one tensor of any
# shape and dtype and nothing else, cannot fail while Dynamo traces them (each entry is checked
# against torch on fake tensors by tests/transforms/test_deferral_trace_faults.py), and reads of
# a tensor's metadata. Anything else a tensor may run is a trace-time failure until shown not.
TRACE_SAFE_CALLS = frozenset(("sin", "cos", "tanh", "sigmoid", "exp", "sum", "clone", "detach", "contiguous", "float",
                              "dim", "size", "numel", "is_floating_point"))
TRACE_SAFE_FUNCTIONS = TRACE_SAFE_CALLS - {"contiguous", "float", "dim", "size"}  # torch.float is a dtype
# Builtins whose own failure is Python-level (Dynamo then runs the frame eagerly, the call as written).
_TRACE_SAFE_BUILTINS = frozenset(("isinstance", "getattr", "hasattr", "super"))
# Operators that cannot fail with a tensor of any shape and dtype on one side and a number on the
# other (``mask - 1`` fails for a bool tensor when the graph runs, ``@`` for any number); comparisons
# by identity.
_NUMBER_OPERATORS = (cst.Add, cst.Multiply, cst.Divide)
_NUMBER_COMPARISONS = (cst.Equal, cst.NotEqual)
_IDENTITY = (cst.Is, cst.IsNot)


def _trace_fault(node: cst.CSTNode) -> Optional[str]:
    """The code of ``node`` if it may fail while Dynamo traces it (on the shapes, dtypes or static
    values it is given), or None: any subscript (``y[0]``: out of range on a tensor), an operator
    between two values that may both be tensors (broadcasting), a call of a torch function, a
    value's method, a builtin or a module not of this file (``self.proj(y)``) that is not vetted.
    Calls of this file's functions are followed by the caller; output calls (the deferred ones and
    the outputs the callers check) are not failures here."""
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms._deferral import _is_output
    from graphmend.transforms._effects import code

    if isinstance(node, cst.Subscript):
        return code(node)
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, _NUMBER_OPERATORS) and (_number(node.left) or _number(node.right)):
            return None
        return code(node)
    if isinstance(node, cst.Comparison):
        left = node.left
        for target in node.comparisons:
            if not (isinstance(target.operator, _IDENTITY) or (
                    isinstance(target.operator, _NUMBER_COMPARISONS) and (_number(left) or _number(target.comparator)))):
                return code(node)
            left = target.comparator
        return None
    assert isinstance(node, cst.Call)
    func = node.func
    if _is_output(node) or (isinstance(func, cst.Call) and dotted(func.func) == B.DEFERRED):
        return None
    if isinstance(func, cst.Name):
        return None if func.value in _TRACE_SAFE_BUILTINS else code(node)
    if isinstance(func, cst.Attribute):
        plain = all(a.keyword is None and not a.star for a in node.args)
        if dotted(func.value) == "torch":
            if func.attr.value in TRACE_SAFE_FUNCTIONS and plain and len(node.args) == 1:
                return None
        elif func.attr.value in TRACE_SAFE_CALLS and not node.args:
            return None
    if isinstance(func, cst.Attribute) and dotted(func.value).split(".")[0] in ("warnings", "logging"):
        return None
    return code(node)


# What the runtime makes from a failed trace: a call of these kinds (``print``, ``warnings.warn``,
# a ``logging.<level>`` function, a method of a logger that ``logging.getLogger`` returns) made in
# the graph by ``graphmend::deferred``, its arguments no tensor: constants, warning categories, a
# ``logging`` level, sizes (``x.shape``: the sizes of the call being traced).
_SHOWN_KINDS = ("call", "warn", "root-log", "log")
_SHOWN_LEVELS = frozenset(("debug", "info", "warning", "warn", "error", "critical", "fatal", "log"))
_SHOWN_NAMES = frozenset(("None", "True", "False", "UserWarning", "DeprecationWarning", "FutureWarning",
                          "PendingDeprecationWarning", "RuntimeWarning", "SyntaxWarning", "ImportWarning",
                          "UnicodeWarning", "BytesWarning", "ResourceWarning", "Warning"))
_SHOWN_LOG_LEVELS = frozenset(f"logging.{level}" for level in ("NOTSET", "DEBUG", "INFO", "WARNING", "WARN", "ERROR",
                                                                 "CRITICAL", "FATAL"))
_SIZE_ATTRIBUTES = frozenset(("shape", "ndim"))
_SIZE_CALLS = frozenset(("size", "dim", "numel"))


def logger_method(call: cst.Call, kind: str) -> bool:
    """Whether a deferred ``call`` of ``kind`` is a Logger's method (``logger.warning``,
    ``logger.warning_once``), not ``print`` nor a function of the ``logging`` module."""
    return kind == "log" or (kind == "call" and not (isinstance(call.func, cst.Name) and call.func.value == "print"))


def made_in_graph(call: cst.Call, kind: str, source: SourceFile, root: Optional[str] = None) -> bool:
    """Whether the runtime makes a deferred ``call`` of ``kind`` in the graph, by the op
    ``graphmend::deferred`` (when its arguments are values the op carries): ``print``,
    ``warnings.warn``, a ``logging.<level>`` function, a method of a module-level logger that
    ``logging.getLogger`` returns (:func:`logging_in_compiled_region.named_logger`: the runtime
    names it). Another logger's method is a record the boundary replays."""
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms.logging_in_compiled_region import named_logger

    if kind not in _SHOWN_KINDS or any(a.star for a in call.args):
        return False
    if logger_method(call, kind):
        return named_logger(source, call, root)
    leaf = dotted(call.func).split(".")[-1]
    if kind == "call":
        return isinstance(call.func, cst.Name) and leaf == "print"
    return kind != "root-log" or leaf in _SHOWN_LEVELS


def shown_from_trace(call: cst.Call, kind: str, source: SourceFile, root: Optional[str] = None) -> bool:
    """Whether the runtime makes ``call`` (a deferred call of ``kind``) when the trace of its graph
    fails after it (``_graphmend_traced``): made in the graph by the op, every argument provably
    no tensor. A tensor's value is not known while tracing, a record is made in no op: those are
    lost with the trace."""
    return made_in_graph(call, kind, source, root) and all(_tensor_free(a.value) for a in call.args)


def _tensor_free(node: cst.CSTNode) -> bool:
    """Whether ``node``'s value holds no tensor, whatever the program's values are."""
    from graphmend.transforms._analysis import dotted

    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.ConcatenatedString):
        return _tensor_free(node.left) and _tensor_free(node.right)
    if isinstance(node, cst.FormattedString):
        return not any(isinstance(p, cst.FormattedStringExpression) for p in node.parts)
    if isinstance(node, cst.Name):
        return node.value in _SHOWN_NAMES
    if isinstance(node, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _tensor_free(e.value) for e in node.elements)
    if isinstance(node, cst.Attribute) and dotted(node) in _SHOWN_LOG_LEVELS:
        return True  # logging.WARNING
    if isinstance(node, cst.Attribute):
        # a tensor's sizes (torch.Size, a Python int): ``x.shape``, ``self.weight.shape``
        return node.attr.value in _SIZE_ATTRIBUTES and bool(dotted(node.value))
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value in _SIZE_CALLS and bool(dotted(node.func.value)) and all(
            a.keyword is None and not a.star and isinstance(a.value, cst.Integer) for a in node.args)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and len(node.args) == 1 and not node.args[0].star:
        # len() of anything is an int; a tuple or list of a size is one of ints
        return node.func.value == "len" or (node.func.value in ("tuple", "list") and _tensor_free(node.args[0].value))
    return False


def _located(node: cst.CSTNode, where: str) -> Optional[tuple[str, str]]:
    fault = _trace_fault(node)
    return (fault, where) if fault else None


def _runs(tree: cst.CSTNode) -> list[cst.CSTNode]:
    """The calls, subscripts and operators in ``tree`` that run, in order: not the text of an
    annotation, nor the callee and site arguments of a deferred call (``_graphmend_deferred(print,
    "call")``: the runtime's, evaluated as constants)."""
    from graphmend.transforms._analysis import dotted

    skip: set[int] = set()
    for node in iter_nodes(tree, (cst.Annotation, cst.Call)):
        if isinstance(node, cst.Annotation) or dotted(node.func) == B.DEFERRED:  # type: ignore[union-attr]
            skip |= {id(n) for n in iter_nodes(node, _AFTER)}
    return [n for n in iter_nodes(tree, _AFTER) if id(n) not in skip]


def _number(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


def _traced_reason(fault: str, where: str) -> str:
    return (f"`{fault}` {where} may fail while Dynamo traces it (a shape, dtype or index that does not fit), after the "
            "call in the same compiled graph: the trace then fails before any op of the graph runs, and what the call "
            "made in the graph (or recorded) is lost, while the original made it before the error (or it may fail when "
            "the graph runs, where a record is lost)")


def failure_after(source: SourceFile, call: cst.Call, traced: bool = True, values: bool = True,
                  follow: Optional["_Follow"] = None, self_type: Optional[tuple[str, str]] = None) -> Optional[str]:
    """Why something that runs after ``call`` in its function (or again in a loop around it), or in
    what that runs, may fail on the values it is given inside the same compiled graph, or None.
    Failures while Dynamo traces count when ``traced`` (the call is not one the runtime makes
    from a failed trace: :func:`shown_from_trace`); failures on values when ``values`` (not when
    the op makes the call in the graph, before a later op of it fails, and no record comes before
    it: :func:`_record_before`).

    What the same-file case checks (:func:`R.region_may_raise`: a check that may be lowered in a
    class in the graph with this one, an index held in a tensor after the call) and, following
    every call made after it into the functions, methods and submodules of this file whole: an
    indexing call or subscript by a tensor, a lookup module (``nn.Embedding``: an id out of range
    fails). Only what runs under the entry on the stack counts (the other classes that may use
    this one are other entries, under which the call runs as written). Where the class of
    ``self`` is known exactly (``self_type``, with ``follow``), ``self.<method>(...)`` is followed
    into the file of the package that defines it. Any other call this file does not define
    (another file's function or module, a value it cannot name) is not shown free of failures."""
    reason = R.region_may_raise(source, call)
    if reason:
        return reason
    func = B.enclosing_function(source, call)
    if func is None:
        return None
    program = follow.program(source) if follow is not None else _program(source)
    return _failure_in(program, _after(source, call, func), func, {id(func)}, traced=traced, values=values,
                       follow=follow, self_type=self_type)


def _program(source: SourceFile):
    from graphmend.transforms._reach import _Program

    return _Program(source)


def trace_faults(source: SourceFile, call: cst.Call) -> tuple[Optional[str], dict[str, str]]:
    """What may fail while Dynamo traces code that may run after ``call`` in the same compiled
    graph, in this file (:func:`_trace_fault`; code not read may fail too): why it may after the
    call in its function (and what that calls here), or None; and, for each module class whose
    compiled entry may run it, why its methods may (a caller may run more after the call
    returned: the call is deferred under the other entries only)."""
    func = B.enclosing_function(source, call)
    if func is None:
        return None, {}
    program = _program(source)
    own = _failure_in(program, _after(source, call, func), func, {id(func)}, values=False)
    faults: dict[str, str] = {}
    for name in sorted(R._entries_of(source, call)):
        for method in R._related_methods(source, {name}, func):
            fault = _failure_in(program, _runs(method.body), method, {id(func), id(method)}, values=False)
            if fault:
                faults[name] = f"in {name}.{method.name.value}, which may run after this call: {fault}"
                break
    return own, faults


def _after(source: SourceFile, call: cst.CSTNode, func: cst.FunctionDef) -> list[cst.CSTNode]:
    """What completes after ``call`` (a call, or any expression or statement) in ``func``: what
    starts after it, what holds it (``self.helper(x) + mask`` adds once the call returned), and
    what a loop around it runs again."""
    start = source.positions[call].end
    inside = {id(n) for n in iter_nodes(call, _AFTER)}
    return [n for n in _runs(func.body) if id(n) not in inside and (
        (source.positions[n].start.line, source.positions[n].start.column) >= (start.line, start.column)
        or any(m is call for m in iter_nodes(n, (type(call),))) or R._same_loop(source, n, call, func))]


def _failure_in(program, nodes, func: cst.FunctionDef, seen: set[int], traced: bool = True,
                values: bool = True, follow: Optional[_Follow] = None,
                self_type: Optional[tuple[str, str]] = None) -> Optional[str]:
    """The first reason in ``nodes`` (and what they call of this file, or of the package where
    ``self``'s class is known): a failure on values, a lookup or code not read when ``values``; a
    failure while tracing when ``traced`` (code not read counts as one when not ``values``)."""
    from graphmend.transforms._effects import code

    source = program.source
    owner = program.owner.get(id(func))
    tensors = R._tensor_names(func)
    found: Optional[tuple[str, str]] = None
    for node in nodes:
        where = f"at {source.path}:{source.line(node)}"
        fault = R._value_fault(node, tensors) if values and isinstance(node, (cst.Call, cst.Subscript)) else None
        if fault:
            return (f"`{fault}` {where} may fail on the values it is given (an index out of range) after the call in "
                    "the same compiled graph, and the records of a graph that fails are lost")
        if not isinstance(node, cst.Call):
            found = found or _located(node, where)
            continue
        if values and _lookup(program, node, owner):
            return (f"`{code(node)}` {where} looks ids up in an embedding table after the call in the same compiled "
                    "graph (an id out of range fails), and the records of a graph that fails are lost")
        targets, why = _resolve(program, node, owner, follow, self_type)
        if why and values:
            return (f"{why} {where}, after the call in the same compiled graph: its code was not shown free of "
                    "failures (the records of a graph that fails are lost)")
        if not targets:
            found = found or _located(node, where)
        for target_program, target, target_self in targets:
            if id(target) in seen:
                continue
            seen.add(id(target))
            inner = _failure_in(target_program, _runs(target.body), target, seen, traced, values, follow, target_self)
            if inner:
                return inner
    # a failure on values is named first (the reason the same-file rules give); then one in tracing
    return _traced_reason(*found) if found and traced else None


def _before(source: SourceFile, call: cst.Call, func: cst.FunctionDef) -> list[cst.CSTNode]:
    """What runs before ``call`` in ``func``: what starts before it, its callee and arguments, and,
    in a loop around it, what runs after it before its next iteration (not what holds it)."""
    start = source.positions[call].start
    inside = {id(n) for n in iter_nodes(call, _AFTER)} - {id(call)}
    return [n for n in _runs(func.body) if not any(m is call for m in iter_nodes(n, (cst.Call,))) and (
        id(n) in inside or (source.positions[n].start.line, source.positions[n].start.column) < (start.line, start.column)
        or R._same_loop(source, n, call, func))]


def _record_before(follow: _Follow, source: SourceFile, call: cst.Call, self_type: Optional[tuple[str, str]],
                   frame: Frame) -> Optional[str]:
    """Why a record may be made before ``call`` in its function (frame of the entry's stack), or
    in what that runs, or None. A deferred call after a record in the region is recorded too (the
    runtime keeps the order), and is lost when its graph fails on values: an output call that may
    be deferred as a record (a Logger's method, arguments the op cannot carry) or code not read
    (it may hold one) before it keeps failures on values a reason. Not read, as elsewhere in
    this analysis: a property's getter (``self.dtype``) and a module hook, which are assumed to
    make no record."""
    func = B.enclosing_function(source, call)
    if func is None:
        return f"{frame.function}() at {frame.file}:{frame.line} is not a function this analysis reads"
    program = follow.program(source)
    return _records_in(follow, program, _before(source, call, func), func, {id(func)}, self_type)


def _records_in(follow: _Follow, program, nodes, func: cst.FunctionDef, seen: set[int],
                self_type: Optional[tuple[str, str]]) -> Optional[str]:
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms._deferral import _is_output
    from graphmend.transforms._effects import code

    source = program.source
    owner = program.owner.get(id(func))
    for node in nodes:
        if not isinstance(node, cst.Call):
            continue
        where = f"at {source.path}:{source.line(node)}"
        callee = node.func
        if isinstance(callee, cst.Call) and dotted(callee.func) == B.DEFERRED:
            kind = callee.args[1].value if len(callee.args) > 1 else None
            plain = node.with_changes(func=callee.args[0].value) if callee.args else node
            if not (isinstance(kind, cst.SimpleString)
                    and shown_from_trace(plain, kind.evaluated_value, source, follow.root)):
                return f"the deferred `{code(node)}` {where}, before it in the region, may be a record"
            continue
        if _is_output(node):
            name = dotted(callee)
            kind = ("call" if name == "print" else "warn" if name in ("warn", "warnings.warn")
                    else "root-log" if name.split(".")[0] == "logging" and name.count(".") == 1 else "log")
            if not shown_from_trace(node, kind, source, follow.root):
                return f"`{code(node)}` {where}, before it in the region, may be deferred as a record"
            continue
        targets, why = _resolve(program, node, owner, follow, self_type)
        if why and not (self_type is not None and isinstance(callee, cst.Attribute) and dotted(callee.value) == "self"
                        and follow.hierarchy.torch_submodule(self_type, callee.attr.value)):
            # (a module of torch's runs no code of the package, so no record)
            return f"{why} {where}, before it in the region: code not read, which may make a record"
        for target_program, target, target_self in targets:
            if id(target) in seen:
                continue
            seen.add(id(target))
            inner = _records_in(follow, target_program, _runs(target.body), target, seen, target_self)
            if inner:
                return inner
    return None


def _resolve(program, call: cst.Call, owner: Optional[str], follow: Optional[_Follow] = None,
             self_type: Optional[tuple[str, str]] = None) -> tuple[list[tuple[object, cst.FunctionDef, Optional[tuple[str, str]]]], str]:
    """The functions ``call`` runs (each with its program and the class of its ``self`` where
    known), and why it may run code not read (or '' if not).

    What may fail on values is judged by :func:`R._value_fault` (indexing calls by name); here
    only whose code runs matters: a function, method or submodule of this file is followed, and,
    where the class of ``self`` is known exactly, ``self.<method>(...)`` in the file of the
    package that defines it (:meth:`_mro.Hierarchy.lookup`); a torch function, a builtin, a
    method of a value (a tensor's) runs no code of the repository; anything else (a function of
    another module, a method or submodule another file defines, a callable held in a variable) is
    code not read."""
    func = call.func
    on_self = isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"
    if follow is not None and self_type is not None and on_self:
        found = follow.hierarchy.lookup(self_type, func.attr.value)  # type: ignore[union-attr]
        if not isinstance(found, str):
            return [(follow.program(found[0]), found[2], self_type)], ""
        submodules = _submodule_forwards(follow, program, self_type, func.attr.value)  # type: ignore[union-attr]
        if submodules:
            return submodules, ""
    if follow is not None and isinstance(func, cst.Name) and func.value not in program.functions \
            and B.module_binds(program.source, func.value) and not _local(program.source, call, func.value):
        imported = follow.hierarchy.function_named(program.source.path, func.value)
        if not isinstance(imported, str):
            return [(follow.program(imported[0]), imported[1], None)], ""
    targets, why = _resolve_here(program, call, owner)
    # a method of self (the same object) keeps its class; a submodule's forward is another object
    return [(program, t, self_type if on_self and t.name.value == func.attr.value else None)  # type: ignore[union-attr]
            for t in targets], why


def _submodule_forwards(follow: _Follow, program, self_type: tuple[str, str], attr: str) -> list:
    """The forwards ``self.attr(...)`` runs when ``self`` is exactly ``self_type``, a class of this
    file whose ``attr`` is only ever built from classes of this file (each instance exactly that
    class: its forward found by Python's lookup), with the class of each; [] when not shown."""
    if self_type[0] != program.source.path or self_type[1] not in program.classes \
            or follow.hierarchy.assigned_outside(self_type, attr) is not None:
        return []
    kinds = program.submodule(self_type[1], attr)
    if not kinds or not all(kinds):
        return []
    found = []
    for kind in kinds:
        forward = follow.hierarchy.lookup((program.source.path, kind), "forward")
        if isinstance(forward, str):
            return []
        found.append((follow.program(forward[0]), forward[2], (program.source.path, kind)))
    return found


def _resolve_here(program, call: cst.Call, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
    """The functions of this file ``call`` runs, and why it may run code not read (or '' if not)."""
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms._effects import code
    from graphmend.transforms._reach import BUILTIN_EXCEPTIONS, NON_WRITING_BUILTINS, READ_METHODS, RUNTIME_PURE

    func = call.func
    if isinstance(func, cst.Name):
        if func.value in program.functions:
            return [program.functions[func.value]], ""
        if func.value in RUNTIME_PURE or func.value in NON_WRITING_BUILTINS or func.value in BUILTIN_EXCEPTIONS:
            return [], ""
        return [], f"`{code(call)}` calls {func.value}()"
    if not isinstance(func, cst.Attribute):
        return [], f"`{code(call)}` calls a value this analysis cannot name"
    receiver = dotted(func.value)
    if receiver == "self" or isinstance(func.value, cst.Call):
        return program.callees(call, owner)
    root = receiver.split(".")[0] if receiver else ""
    kind, _ = program.t.func(func)
    if kind in ("torch", "F") or root in ("math", "warnings", "logging", "logger"):
        return [], ""
    if root in program.classes:
        found = program.resolve(root, func.attr.value) if receiver == root else None
        return ([found], "") if found is not None else ([], f"`{code(call)}` calls a method not defined in this file")
    if root == "self" and func.attr.value not in PURE_METHODS | READ_METHODS:
        return [], f"`{code(call)}` calls a method of an attribute"
    if root and B.module_binds(program.source, root) and not _local(program.source, call, root):
        return [], f"`{code(call)}` calls into {root}, defined or imported at module level"
    return [], ""


def _local(source: SourceFile, node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` is a parameter or local of the function around ``node``."""
    func = B.enclosing_function(source, node)
    if func is None:
        return False
    scope = source.scopes.get(func.body) if hasattr(source, "scopes") else None
    params = {p.name.value for p in (*func.params.params, *func.params.posonly_params, *func.params.kwonly_params)}
    return name in params or (scope is not None and name in scope and bool(scope.assignments[name]))


def _lookup(program, call: cst.Call, owner: Optional[str]) -> bool:
    """Whether ``call`` is ``self.attr(...)`` of a submodule built from a lookup module."""
    from graphmend.transforms._analysis import dotted

    func = call.func
    if owner is None or not (isinstance(func, cst.Attribute) and dotted(func.value) == "self"):
        return False
    for cls in program._ancestors(owner):
        for node in iter_nodes(program.classes[cls].body, (cst.Assign,)):
            for target in node.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and dotted(t.value) == "self" and t.attr.value == func.attr.value \
                        and isinstance(node.value, cst.Call) and dotted(node.value.func).split(".")[-1] in _LOOKUP_MODULES:
                    return True
    return False
