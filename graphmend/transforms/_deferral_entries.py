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


def foreign_entries(source: SourceFile, call: cst.Call, ctx: RuleContext, traced: bool = True) -> Union[tuple[str, ...], str]:
    """The entries (as ``entries=`` expressions) of other files a deferred ``call`` may be recorded
    under, or why there are none (a failure while tracing after it counts when ``traced``)."""
    if ctx.root is None:
        return "no compiled entry of another file is known (static mode: no stack from a real run)"
    lines = range(source.line(call), source.end_line(call) + 1)
    stacks = [stack for line, stack in ctx.stacks if line in lines]
    if not stacks:
        return "Dynamo reported no stack for the call, so its compiled entry is not known"
    entries: list[str] = []
    reasons: list[str] = []
    cache: dict[str, SourceFile] = {}
    for stack in stacks:
        found = _entry_of(source, stack, ctx.root, cache, traced)
        if isinstance(found, str):
            # Every stack must pass: the runtime knows the entry, not the path through it, and a
            # stack that fails may run under an entry another stack names (the same forward calling
            # the helper twice, an index that can fail between the calls).
            reasons.append(found)
        elif found[0] not in entries:
            entries.append(found[0])
    return reasons[0] if reasons else tuple(sorted(entries))


def _entry_of(source: SourceFile, stack: tuple[Frame, ...], root: str, cache: dict,
              traced: bool = True) -> Union[str, tuple[str]]:
    """(the entry expression,) for one stack through the call, or why it cannot be named."""
    frames = [f for f in stack if f.inside_repo or not _plumbing(f)]
    if not frames or frames[-1].file != source.path:
        return "the stack Dynamo reported does not end at the call"
    callers = frames[:-1]
    outside = next((f for f in callers if not f.inside_repo), None)
    if outside is not None:
        return (f"the compiled entry reaches the call through {outside.function}() outside the repository, whose "
                "code after the call was not read")
    entry: Optional[tuple[SourceFile, cst.ClassDef]] = None
    for frame in callers:
        other = _read(root, frame.file, cache)
        if isinstance(other, str):
            return other
        site = _call_at(other, frame)
        if site is None:
            return f"no call at {frame.file}:{frame.line} in {frame.function}() to follow"
        func = B.enclosing_function(other, site)
        shown = f"{frame.file}:{frame.line}"
        reason = failure_after(other, site, traced)
        if reason:
            return f"under the entry calling it at {shown}: {reason}"
        output = _output_in(other, func)
        if output:
            return (f"{frame.function}() at {shown} makes output of its own ({output}), which would stay immediate and "
                    "appear before the deferred call's although it came after it")
        cls = B._enclosing_class(other, site)
        if entry is None and frame.function == "forward" and cls is not None \
                and cls.name.value in B.module_classes_with_forward(other) and other.parent(cls) is other.module:
            entry = (other, cls)
    if entry is None:
        return "no forward of a module class of the repository is on the stack above the call (no entry to name)"
    name = _relative_name(source.path, entry[0].path, root)
    if name is None:
        return (f"{entry[0].path} and {source.path} are not in one package (a folder between them has no "
                "__init__.py), so the entry's module cannot be named from the call's")
    levels, module = name
    return (f"__name__.rsplit('.', {levels})[0] + {'.' + module + '.' + entry[1].name.value!r}",)


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
    if rel in cache:
        return cache[rel]
    from graphmend.sources import SourceError as ReadError, read_source

    try:
        cache[rel] = SourceFile(rel, read_source(root, rel))
    except (ReadError, SourceError, OSError, ValueError) as exc:
        return f"{rel}, which calls into this file, cannot be read: {exc}"
    return cache[rel]


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


def failure_after(source: SourceFile, call: cst.Call, traced: bool = True) -> Optional[str]:
    """Why something that runs after ``call`` in its function (or again in a loop around it), or in
    what that runs, may fail on the values it is given inside the same compiled graph, or None.
    Failures while Dynamo traces count when ``traced`` (the call is not one the runtime makes
    from a failed trace: :func:`shown_from_trace`).

    What the same-file case checks (:func:`R.region_may_raise`: a check that may be lowered in a
    class in the graph with this one, an index held in a tensor after the call) and, following
    every call made after it into the functions, methods and submodules of this file whole: an
    indexing call or subscript by a tensor, a lookup module (``nn.Embedding``: an id out of range
    fails). Only what runs under the entry on the stack counts (the other classes that may use
    this one are other entries, under which the call runs as written). A call this file does not define (another
    file's method or module, a value it cannot name) is not shown free of failures."""
    from graphmend.transforms._reach import _Program

    reason = R.region_may_raise(source, call)
    if reason:
        return reason
    func = B.enclosing_function(source, call)
    if func is None:
        return None
    program = _Program(source)
    return _failure_in(program, _after(source, call, func), func, {id(func)}, traced=traced)


def trace_faults(source: SourceFile, call: cst.Call) -> tuple[Optional[str], dict[str, str]]:
    """What may fail while Dynamo traces code that may run after ``call`` in the same compiled
    graph, in this file (:func:`_trace_fault`; code not read may fail too): why it may after the
    call in its function (and what that calls here), or None; and, for each module class whose
    compiled entry may run it, why its methods may (a caller may run more after the call
    returned: the call is deferred under the other entries only)."""
    from graphmend.transforms._reach import _Program

    func = B.enclosing_function(source, call)
    if func is None:
        return None, {}
    program = _Program(source)
    own = _failure_in(program, _after(source, call, func), func, {id(func)}, values=False)
    faults: dict[str, str] = {}
    for name in sorted(R._entries_of(source, call)):
        for method in R._related_methods(source, {name}, func):
            fault = _failure_in(program, _runs(method.body), method, {id(func), id(method)}, values=False)
            if fault:
                faults[name] = f"in {name}.{method.name.value}, which may run after this call: {fault}"
                break
    return own, faults


def _after(source: SourceFile, call: cst.Call, func: cst.FunctionDef) -> list[cst.CSTNode]:
    """What completes after ``call`` in ``func``: what starts after it, what holds it
    (``self.helper(x) + mask`` adds once the call returned), and what a loop around it runs again."""
    start = source.positions[call].end
    inside = {id(n) for n in iter_nodes(call, _AFTER)}
    return [n for n in _runs(func.body) if id(n) not in inside and (
        (source.positions[n].start.line, source.positions[n].start.column) >= (start.line, start.column)
        or any(m is call for m in iter_nodes(n, (cst.Call,))) or R._same_loop(source, n, call, func))]


def _failure_in(program, nodes, func: cst.FunctionDef, seen: set[int], traced: bool = True,
                values: bool = True) -> Optional[str]:
    """The first reason in ``nodes`` (and what they call of this file): a failure on values, a lookup
    or code not read when ``values``; a failure while tracing when ``traced`` (code not read counts
    as one when not ``values``)."""
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
        targets, why = _resolve(program, node, owner)
        if why and values:
            return (f"{why} {where}, after the call in the same compiled graph: its code was not shown free of "
                    "failures (the records of a graph that fails are lost)")
        if not targets:
            found = found or _located(node, where)
        for target in targets:
            if id(target) in seen:
                continue
            seen.add(id(target))
            inner = _failure_in(program, _runs(target.body), target, seen, traced, values)
            if inner:
                return inner
    # a failure on values is named first (the reason the same-file rules give); then one in tracing
    return _traced_reason(*found) if found and traced else None


def _resolve(program, call: cst.Call, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
    """The functions of this file ``call`` runs, and why it may run code not read (or '' if not).

    What may fail on values is judged by :func:`R._value_fault` (indexing calls by name); here
    only whose code runs matters: a function, method or submodule of this file is followed; a
    torch function, a builtin, a method of a value (a tensor's) runs no code of the repository;
    anything else (a function of another module, a method or submodule another file defines, a
    callable held in a variable) is code not read."""
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
