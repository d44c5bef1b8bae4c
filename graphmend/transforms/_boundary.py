"""The eager boundary shared by GM2xx (deferred side effects) and GM3xx (trap lowering).

Both transformations move work out of the compiled region: a ``print``/``logging``/``warnings``
call is *recorded* inside the graph and *replayed* afterwards; a ``raise`` under a tensor
condition becomes an in-graph ``torch._assert_async`` whose ``RuntimeError`` is turned back into
the original exception afterwards. "Afterwards" must be eager Python code that runs after every
compiled call: the **boundary**. This module holds

* :data:`RUNTIME` — the small runtime inlined at the END of every rewritten module (appending it
  keeps every original line number, so LogRecord and ``warnings`` locations elsewhere in the file
  do not move). It depends on torch only: fixed code never needs graphmend installed.
* :func:`plan` — where the boundary goes for a site, whether that placement is proven, and the
  edits that add the runtime (one identical edit per file, so several fixes merge).
* small libcst helpers the rules share (positions, textual wrapping of an expression).

What we learned under torch 2.13 (each point is checked by ``tests/transforms/test_boundary.py``):

* ``torch.compile(module)`` and ``module.compile()`` start tracing at ``forward`` (the
  ``Module.__call__`` frames live in torch and are skipped). Forward hooks are traced too, and a
  flush inside a traced ``try/finally`` drops the frame, so neither can host the replay.
* ``torch.compiler.disable(forward, recursive=False)`` runs ``forward`` eagerly and compiles what
  it calls — one graph — but when the module is *nested* in an outer compiled region Dynamo
  refuses to inline a disabled function: the outer graph breaks (GB0099).
* ``torch._dynamo.eval_frame.skip_code(code)`` has the first property without the second: the
  frame runs eagerly when Dynamo would start a graph at it, and is inlined like any function
  when an outer frame is traced. The boundary checks ``torch.compiler.is_compiling()`` so that,
  inlined, it only forwards the call (the outer boundary replays). Where ``skip_code`` is missing
  the runtime falls back to ``disable(recursive=False)``.
* Records must not live in a list: Dynamo guards on a list's length, so every call recompiles.
  A linked chain of small objects is guarded by type only (one graph across calls).
* The replay itself must be ``torch.compiler.disable``d: the frames a ``recursive=False`` /
  skipped frame calls are compiled, and Dynamo would break on every ``print`` of the replay.
* The boundary wraps ``forward`` in a ``*args, **kwargs`` function; ``functools.wraps`` keeps
  the signature for ``inspect`` (transformers reads it) and ``torch.jit.script`` unwraps it.
* ``torch._assert_async(cond, msg)`` stays in the graph with the eager, aot_eager and inductor
  backends on CPU and raises ``RuntimeError(msg)`` exactly. On CUDA it is a device-side assert
  (message lost, context unusable), so the runtime keeps the original branch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from graphmend.model import Edit
from graphmend.transforms.base import SourceFile

# Names the runtime defines; a module that already defines the first one has the runtime.
MARKER = "_graphmend_deferred"
DEFERRED = "_graphmend_deferred"
TRAP = "_graphmend_trap"
EQUAL = "_graphmend_equal"
BOUNDARY = "_graphmend_boundary"

RUNTIME = '''

# ----------------------------------------------------------------------------------------------
# graphmend runtime: deferred side effects (GM201-GM203) and trap lowering (GM301, GM302).
# Added by `graphmend fix`; it needs torch only. In eager mode every rewritten call runs exactly
# as written. Under torch.compile, print / logging / warnings calls are recorded inside the graph
# (arguments copied at the call) and replayed in order, with their original source location, by
# the boundary installed on this module's forward methods once the compiled call has returned.
# A raise under a tensor condition becomes an in-graph torch._assert_async on CPU; the boundary
# turns its RuntimeError back into the original exception type and message.
import builtins as _graphmend_builtins
import functools as _graphmend_functools
import logging as _graphmend_logging
import sys as _graphmend_sys

import torch as _graphmend_torch


def _graphmend_shared_runtime():
    # One record chain for every rewritten module: whichever boundary runs replays them all.
    runtime = _graphmend_sys.modules.get("_graphmend_runtime")
    if runtime is None:
        import types

        class Record:
            # A chain, not a list: Dynamo guards on a list's length and would recompile the
            # graph on every call; a new object linked to the old head is guarded by type only.
            __slots__ = ("replay", "previous")

            def __init__(self, replay, previous):
                self.replay = replay
                self.previous = previous

        runtime = types.ModuleType("_graphmend_runtime")
        runtime.Record = Record
        runtime.root = runtime.head = Record(None, None)
        _graphmend_sys.modules["_graphmend_runtime"] = runtime
    return runtime


_graphmend_runtime = _graphmend_shared_runtime()
_graphmend_file = _graphmend_shared_runtime.__code__.co_filename
_graphmend_trap_prefix = "graphmend-trap:"
_graphmend_levels = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40,
                     "exception": 40, "critical": 50, "fatal": 50}


def _graphmend_snapshot(value):
    # Copied at the call: a tensor changed in place later in the region is shown as it was.
    if isinstance(value, _graphmend_torch.Tensor):
        return value.detach().clone()
    if type(value) in (list, tuple):
        return type(value)(_graphmend_snapshot(item) for item in value)
    if type(value) is dict:
        return {key: _graphmend_snapshot(item) for key, item in value.items()}
    return value


def _graphmend_deferred(callee, kind, line=0, function=""):
    """``callee`` itself in eager mode; under torch.compile, a recorder replayed after the call."""
    if not _graphmend_torch.compiler.is_compiling():
        return callee

    def record(*args, **kwargs):
        entry = (callee, kind, line, function, _graphmend_snapshot(args), _graphmend_snapshot(kwargs))
        _graphmend_runtime.head = _graphmend_runtime.Record((_graphmend_replay, entry), _graphmend_runtime.head)

    return record


def _graphmend_replay(callee, kind, line, function, args, kwargs):
    if kind == "log" and isinstance(getattr(callee, "__self__", None), _graphmend_logging.Logger):
        return _graphmend_log(callee.__self__, callee.__name__, line, function, args, kwargs)
    if kind == "root-log":
        if not _graphmend_logging.root.handlers:  # logging.warning() & co. do this first
            _graphmend_logging.basicConfig()
        return _graphmend_log(_graphmend_logging.root, callee.__name__, line, function, args, kwargs)
    if kind == "warn":
        return _graphmend_warn(line, *args, **kwargs)
    return callee(*args, **kwargs)


def _graphmend_log(logger, method, line, function, args, kwargs):
    # Logger._log with the call site as the location (findCaller would name the replay).
    if method == "log":
        level, args = args[0], args[1:]
    else:
        level = _graphmend_levels[method]
    if not logger.isEnabledFor(level):
        return
    exc_info = kwargs.get("exc_info", method == "exception")
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif exc_info and not isinstance(exc_info, tuple):
        exc_info = _graphmend_sys.exc_info()
    record = logger.makeRecord(logger.name, level, _graphmend_file, line, args[0], args[1:],
                               exc_info or None, function, kwargs.get("extra"), None)
    logger.handle(record)


def _graphmend_warn(line, message, category=None, stacklevel=1, source=None):
    # warnings.warn(stacklevel=1) with the call site as the location; the module's own
    # __warningregistry__ keeps the once-per-location filters shared with eager calls.
    import warnings

    if isinstance(message, Warning):
        category = message.__class__
    module_globals = globals()
    warnings.warn_explicit(message, category or UserWarning, _graphmend_file, line,
                           module_globals.get("__name__", "<string>"),
                           module_globals.setdefault("__warningregistry__", {}), module_globals, source)


@_graphmend_torch.compiler.disable
def _graphmend_flush():
    """Replay every recorded call, oldest first; Dynamo must not trace the replay itself."""
    runtime = _graphmend_runtime
    node, pending = runtime.head, []
    runtime.head = runtime.root
    while node is not None and node is not runtime.root:
        pending.append(node.replay)
        node = node.previous
    for replay, entry in reversed(pending):
        replay(*entry)


def _graphmend_trap(condition, exc_type, message, raise_when=True):
    """``condition`` itself in eager mode; under torch.compile on CPU, an in-graph assertion."""
    if not _graphmend_torch.compiler.is_compiling():
        return condition
    if not (isinstance(condition, _graphmend_torch.Tensor) and condition.numel() == 1
            and condition.device.type == "cpu"
            and getattr(_graphmend_builtins, exc_type.__name__, None) is exc_type):
        # Keep the Python branch (and its graph break): on CUDA an assert is a fatal
        # device-side error, and only builtin exceptions can be rebuilt at the boundary.
        return condition
    ok = _graphmend_torch.logical_not(condition) if raise_when else condition.bool()
    _graphmend_torch._assert_async(ok, _graphmend_trap_prefix + exc_type.__name__ + ":" + message)
    return not raise_when


def _graphmend_equal(a, b):
    """``torch.equal(a, b)`` in eager mode; under torch.compile a 0-d bool tensor (no break)."""
    if not _graphmend_torch.compiler.is_compiling():
        return _graphmend_torch.equal(a, b)
    if a.shape != b.shape:  # static under compile; torch.equal never broadcasts
        return _graphmend_torch.zeros((), dtype=_graphmend_torch.bool, device=a.device)
    return (a == b).all()  # promotes dtypes as torch.equal does; NaN != NaN in both


def _graphmend_restore(error):
    text = str(error)
    if not text.startswith(_graphmend_trap_prefix):
        return None
    name, _, message = text[len(_graphmend_trap_prefix):].partition(":")
    exc_type = getattr(_graphmend_builtins, name, None)
    if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
        return None
    return exc_type(message)


def _graphmend_boundary(function):
    """Make ``function`` (a forward method or a compiled function) an eager boundary."""
    if getattr(function, "__graphmend_boundary__", False):
        return function

    @_graphmend_functools.wraps(function)
    def boundary(*args, **kwargs):
        if _graphmend_torch.compiler.is_compiling():
            # Inlined into an outer compiled region: the outer boundary replays.
            return function(*args, **kwargs)
        if _graphmend_runtime.head is not _graphmend_runtime.root:
            _graphmend_flush()  # left by an earlier compiled call that had no boundary
        try:
            result = function(*args, **kwargs)
        except BaseException as error:
            # Graphs that returned before the failure applied their records: show them
            # before the exception propagates, as the original printed before raising.
            if _graphmend_runtime.head is not _graphmend_runtime.root:
                _graphmend_flush()
            restored = _graphmend_restore(error) if isinstance(error, RuntimeError) else None
            if restored is None:
                raise
        else:
            if _graphmend_runtime.head is not _graphmend_runtime.root:
                _graphmend_flush()
            return result
        raise restored  # outside the handler: no chained RuntimeError, as in eager mode

    boundary.__graphmend_boundary__ = True
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return _graphmend_torch.compiler.disable(boundary, recursive=False)
    # torch.compile(module) would start tracing here: run this frame eagerly and compile what
    # it calls; nested in an outer compiled frame it is still inlined (no graph break).
    skip_code(boundary.__code__)
    return boundary


def _graphmend_install_boundaries(namespace):
    # Every module class (and torch.compile'd function) defined here becomes a boundary, so
    # whichever of them is the outermost compiled entry replays what the region recorded.
    name = namespace.get("__name__")
    for key, value in list(namespace.items()):
        if (isinstance(value, type) and issubclass(value, _graphmend_torch.nn.Module)
                and value.__module__ == name and callable(vars(value).get("forward"))):
            value.forward = _graphmend_boundary(vars(value)["forward"])
        elif (callable(value) and getattr(value, "_is_torch_compile", False)
              and not key.startswith("_graphmend_") and getattr(value, "__module__", None) == name):
            namespace[key] = _graphmend_boundary(value)


_graphmend_install_boundaries(globals())
'''


@dataclass(frozen=True)
class Placement:
    """Where the boundary for one site is, and whether it is proven to run after the region."""

    proven: bool
    where: str  # a phrase for notes ("the forward of T5Stack and the other module classes here")
    why_not: str = ""  # when not proven: what the user must add at their compile site


def has_runtime(source: SourceFile) -> bool:
    for stmt in source.module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == MARKER:
            return True
    return False


def runtime_edits(source: SourceFile) -> tuple[Edit, ...]:
    """The edit appending :data:`RUNTIME` to the file (none when it is there already).

    The edit is the same for every fix of the file, so the engine merges it; it is an insertion
    after the last line, so no original line moves.
    """
    if has_runtime(source):
        return ()
    # (A file without a final newline is fine: the engine completes the last line before
    # applying whole-line edits and takes the newline away again afterwards.)
    n = len(source.lines)
    return (Edit(file=source.path, start_line=n + 1, end_line=n, new_text=RUNTIME.lstrip("\n") if n == 0 else RUNTIME, old_text=""),)


def module_classes_with_forward(source: SourceFile) -> list[str]:
    names = []
    for stmt in source.module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.bases:
            for item in stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ():
                if isinstance(item, cst.FunctionDef) and item.name.value == "forward":
                    names.append(stmt.name.value)
                    break
    return names


def _is_torch_compile(expr: cst.BaseExpression) -> bool:
    target = expr.func if isinstance(expr, cst.Call) else expr
    return isinstance(target, cst.Attribute) and target.attr.value == "compile" and isinstance(target.value, cst.Name) and target.value.value in ("torch", "th")


def compiled_functions(source: SourceFile) -> list[str]:
    """Module-level functions compiled in this file (``@torch.compile`` or ``f = torch.compile(f)``)."""
    names = []
    for stmt in source.module.body:
        if isinstance(stmt, cst.FunctionDef) and any(_is_torch_compile(d.decorator) for d in stmt.decorators):
            names.append(stmt.name.value)
    return names


def plan(source: SourceFile, site: cst.CSTNode) -> Placement:
    """Where the boundary for ``site`` is: the forward of its module class or its compiled function.

    Proven when the site is inside a method of a module class of this file that defines
    ``forward`` (the runtime makes that forward, and every other one here, a boundary), or inside
    a module-level function compiled in this file. Otherwise the records would wait for some
    later boundary, and the note says what to add at the compile site.
    """
    cls = None
    func = None
    cur = source.parent(site)
    while cur is not None:
        if isinstance(cur, cst.FunctionDef) and func is None:
            func = cur
        if isinstance(cur, cst.ClassDef):
            cls = cur
            break
        cur = source.parent(cur)
    forwards = module_classes_with_forward(source)
    if cls is not None and cls.name.value in forwards and source.parent(cls) is source.module:
        return Placement(True, f"the forward of {cls.name.value} (and of every module class in this file)")
    outer = _outermost_function(source, site)
    if cls is None and outer is not None and outer.name.value in compiled_functions(source):
        return Placement(True, f"the compiled function {outer.name.value}")
    module = source.path[:-3].replace("/", ".") if source.path.endswith(".py") else source.path
    return Placement(
        False,
        "",
        "no module class with a forward or compiled function in this file encloses the call, so no "
        "boundary is proven to run after the compiled region; at your compile site write "
        f"`compiled = {module}._graphmend_boundary(torch.compile(fn))` (for a module: "
        f"`Model.forward = {module}._graphmend_boundary(Model.forward)` before compiling)",
    )


def _outermost_function(source: SourceFile, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    found = None
    cur = source.parent(node)
    while cur is not None:
        if isinstance(cur, cst.FunctionDef):
            found = cur
        cur = source.parent(cur)
    return found


def enclosing_function(source: SourceFile, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    cur = source.parent(node)
    while cur is not None and not isinstance(cur, cst.FunctionDef):
        cur = source.parent(cur)
    return cur


def wrap_text(source: SourceFile, node: cst.CSTNode, prefix: str, suffix: str) -> Edit:
    """An edit that writes ``prefix`` before ``node`` and ``suffix`` after it, nothing else.

    Only the lines the node spans change, and their count stays the same, so every later line
    (and the locations Python reports for it) stays where it was.
    """
    pos = source.positions[node]
    first, last = pos.start.line, pos.end.line
    lines = source.lines[first - 1 : last]
    old = "".join(lines)
    if first == last:
        text = lines[0]
        new = text[: pos.start.column] + prefix + text[pos.start.column : pos.end.column] + suffix + text[pos.end.column :]
        return Edit(source.path, first, last, new, old)
    head = lines[0][: pos.start.column] + prefix + lines[0][pos.start.column :]
    tail = lines[-1][: pos.end.column] + suffix + lines[-1][pos.end.column :]
    new = head + "".join(lines[1:-1]) + tail
    return Edit(source.path, first, last, new, old)


def call_line(source: SourceFile, call: cst.Call) -> int:
    """The line Python reports for a call (``f_lineno`` during it): the callee's last name.

    CPython 3.11+ attributes a call to the line of the called attribute (``logger\\n.warning(``
    reports the ``.warning`` line), so that is the LogRecord / warnings location to replay.
    """
    func = call.func
    if isinstance(func, cst.Attribute):
        return source.positions[func.attr].start.line
    return source.positions[func].start.line


def code_name(source: SourceFile, node: cst.CSTNode) -> str:
    """``co_name`` of the function the node runs in (a LogRecord's ``funcName``)."""
    func = enclosing_function(source, node)
    return func.name.value if func is not None else "<module>"


def in_except_handler(source: SourceFile, node: cst.CSTNode) -> bool:
    cur = source.parent(node)
    while cur is not None and not isinstance(cur, cst.FunctionDef):
        if isinstance(cur, (cst.ExceptHandler, cst.ExceptStarHandler)):
            return True
        cur = source.parent(cur)
    return False


def inside_try(source: SourceFile, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The nearest enclosing ``try`` with handlers (within the function), whose body holds ``node``."""
    cur, child = source.parent(node), node
    while cur is not None and not isinstance(cur, cst.FunctionDef):
        if isinstance(cur, (cst.Try, cst.TryStar)) and cur.handlers and child is cur.body:
            return cur
        child, cur = cur, source.parent(cur)
    return None


# ----------------------------------------------------------------------------------------------
# What GM201-GM203 share: find the call, prove it can be deferred, build the fix.

TENSOR_METHODS = frozenset(
    "any all item sum max min mean amax amin equal allclose isnan isinf isfinite count_nonzero "
    "nonzero numel_nonzero norm abs".split()
)


def looks_tensor_valued(expr: cst.CSTNode) -> bool:
    """Whether an expression reads tensor values (a reduction, a torch call, a lowered trap).

    Used to tell a data-dependent ``raise`` (one Dynamo turns into a graph break or an in-graph
    assertion) from an argument check on Python values, which Dynamo resolves while tracing.
    """
    from graphmend.transforms.base import iter_nodes

    for call in iter_nodes(expr, (cst.Call,)):
        func = call.func
        if isinstance(func, cst.Attribute):
            if func.attr.value in TENSOR_METHODS:
                return True
            root = func
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name) and root.value in ("torch", "th"):
                return True
        elif isinstance(func, cst.Name) and func.value == TRAP:
            return True
    return False


def region_may_raise(source: SourceFile, call: cst.CSTNode) -> Optional[str]:
    """Why the compiled graph holding ``call`` may raise after it, losing its records, or None.

    Records are graph side effects: Dynamo applies them when the graph returns. A graph that
    raises inside (a lowered ``torch._assert_async``) loses the records made before it in that
    graph. A raise outside the graph (a tensor-guarded ``raise`` Dynamo breaks on, or a check on
    Python values) comes after the graph returned, and the boundary replays the records before
    the exception propagates, as the original printed before raising. So what counts is an
    in-graph check: a lowered trap, or a candidate that GM301 may lower, that can run after the
    call in the same graph: later in the same function, anywhere in the same class, in a
    module-level function, or in a class of this file that (transitively) uses this class.
    """
    from graphmend.transforms.base import iter_nodes

    func = enclosing_function(source, call)
    call_line = source.line(call)
    own = _enclosing_class(source, call)
    related = _users_of(source, own.name.value) if own is not None else None
    for node in iter_nodes(source.module, (cst.If, cst.Assert, cst.Call)):
        if isinstance(node, cst.Call):
            if not (isinstance(node.func, cst.Name) and node.func.value == TRAP):
                continue
        elif isinstance(node, cst.Assert):
            if not looks_tensor_valued(node.test):
                continue
        elif not (_raises_only(node) and lowerable_condition(node.test)):
            continue
        if func is not None and enclosing_function(source, node) is func and source.line(node) < call_line:
            continue
        cls = _enclosing_class(source, node)
        if related is not None and cls is not None and cls.name.value not in related:
            continue  # a class that never calls into this one: another graph
        return f"line {source.line(node)} may raise inside the same compiled graph (a tensor-valued check), and the records of a graph that raises are lost"
    return None


def _raises_only(node: cst.If) -> bool:
    """Whether the body is one ``raise E("literal")`` of a builtin exception (what GM301 lowers)."""
    import builtins

    body = node.body.body if isinstance(node.body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()
    if len(body) != 1:
        return False
    small = body[0].body if isinstance(body[0], cst.SimpleStatementLine) else [body[0]]
    if len(small) != 1 or not isinstance(small[0], cst.Raise):
        return False
    exc = small[0].exc
    if not (isinstance(exc, cst.Call) and isinstance(exc.func, cst.Name) and len(exc.args) == 1):
        return False
    kind = getattr(builtins, exc.func.value, None)
    return isinstance(kind, type) and issubclass(kind, Exception) and isinstance(exc.args[0].value, (cst.SimpleString, cst.ConcatenatedString))


def lowerable_condition(test: cst.BaseExpression) -> bool:
    """A condition GM301 may turn into an in-graph assertion: tensor-valued, no ``len()``."""
    from graphmend.transforms.base import iter_nodes

    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if any(isinstance(c.func, cst.Name) and c.func.value == "len" for c in iter_nodes(test, (cst.Call,))):
        return False  # len() of a (dynamic-shape) tensor is a Python int
    return looks_tensor_valued(test)


def _enclosing_class(source: SourceFile, node: cst.CSTNode) -> Optional[cst.ClassDef]:
    cur = source.parent(node)
    while cur is not None and not isinstance(cur, cst.ClassDef):
        cur = source.parent(cur)
    return cur


def _users_of(source: SourceFile, name: str) -> set[str]:
    """``name`` and the classes of this file whose bodies mention it, transitively."""
    from graphmend.transforms.base import iter_nodes

    mentions: dict[str, set[str]] = {}
    for stmt in source.module.body:
        if isinstance(stmt, cst.ClassDef):
            mentions[stmt.name.value] = {n.value for n in iter_nodes(stmt.body, (cst.Name,))} | {
                n.attr.value for n in iter_nodes(stmt.body, (cst.Attribute,))
            }
    users = {name}
    changed = True
    while changed:
        changed = False
        for cls, names in mentions.items():
            if cls not in users and names & users:
                users.add(cls)
                changed = True
    return users


def module_binds(source: SourceFile, name: str) -> bool:
    """Whether ``name`` is bound at module level (def, class, assignment, import)."""
    scope = source.scopes.get(source.module)
    if scope is None:
        return False
    return bool(scope.assignments[name]) if name in scope else False
