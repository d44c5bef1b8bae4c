"""The eager boundary shared by GM2xx (deferred side effects) and GM3xx (trap lowering).

Both transformations move work out of the compiled region: a ``print``/``logging``/``warnings``
call is *recorded* inside the graph and *replayed* afterwards; a ``raise`` under a tensor
condition becomes an in-graph ``torch._assert_async`` whose ``RuntimeError`` is turned back into
the original exception afterwards. "Afterwards" must be eager Python code that runs after every
compiled call: the **boundary**. This module holds

* :func:`runtime_edits` — what a fix adds so the rewritten module has the runtime (``_runtime.py``):
  in a package, two lines at the END importing the package's one stamped copy (``_runtime_copy.py``);
  in a script, :data:`RUNTIME`, the compact runtime inlined at the END (appending keeps every
  original line number, so LogRecord and ``warnings`` locations in the file do not move). It
  depends on torch only: fixed code never needs graphmend installed.
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
* A boundary is proven only where it runs: the runtime records a deferred call (and lowers a
  trap) only in a compiled region that a boundary started (``runtime.region``, a plain
  ``threading.local`` that Dynamo guards on per thread; each thread's records chain there too, so
  a boundary replays only its own thread's). A boundary starts one when Dynamo skipped its frame
  and traces the next (its frame callback is set) or when it wraps a ``torch.compile``'d
  callable; one called outside torch.compile runs eagerly and starts none, so a compiled callable
  of another file it calls is no boundary's region. Under a compiled entry that only inlines boundaries (a lambda,
  ``nn.Sequential``, a function of another file) the call runs as written and breaks the graph as
  before: nothing is lost, nothing waits for a later call. Where a module of this file that may
  be the entry can fail after the call in the same graph (the records of a graph that raises are
  lost), the call names the entries it may be recorded under (``entries=``, checked against the
  class of the boundary that started the region: a region entered after a graph break has its
  own).
* ``torch._assert_async(cond, msg)`` stays in the graph with the eager, aot_eager and inductor
  backends on CPU and raises ``RuntimeError(msg)`` exactly. On CUDA it is a device-side assert
  (message lost, context unusable), so the runtime keeps the original branch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union, Sequence

import libcst as cst

from graphmend.model import Decline, Edit, FileWrite, Fix, Safety, fingerprint
from graphmend.transforms import _runtime_copy as RC
from graphmend.transforms.base import RuleContext, SourceFile, iter_nodes

# Names the runtime gives a rewritten module; one that defines or imports MARKER has the runtime.
MARKER = RC.INSTALL
DEFERRED = "_graphmend_deferred"
TRAP = "_graphmend_trap"
EQUAL = "_graphmend_equal"
BOUNDARY = "_graphmend_boundary"

RUNTIME = RC.INLINE  # the compact inline form, for a file that is not in a package


@dataclass(frozen=True)
class Placement:
    """Where the boundary for one site is, and whether it is proven to run after the region."""

    proven: bool
    where: str  # a phrase for notes ("the forward of T5Stack and the other module classes here")
    why_not: str = ""  # when not proven: what the user must add at their compile site


def has_runtime(source: SourceFile) -> bool:
    """Whether the file already has the runtime: inline (defines MARKER) or imported."""
    for stmt in source.module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == MARKER:
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar) \
                        and any(a.evaluated_name == MARKER for a in small.names):
                    return True
    return False


def runtime_edits(source: SourceFile, ctx: Optional[RuleContext] = None) -> Union[tuple[tuple[Edit, ...], tuple[FileWrite, ...]], str]:
    """What a fix adds for the runtime: (edits, files), or why it cannot (a hand-edited copy).

    In a package (``ctx.runtime``): two lines at the end of the file importing the package's
    runtime copy, and that copy as a whole file. Elsewhere: the compact runtime itself at the
    end (:data:`RUNTIME`). The edit is the same for every fix of the file, so the engine merges
    it; it is an insertion after the last line, so no original line moves. Nothing is added to
    a file that has the runtime already.
    """
    spot = ctx.runtime if ctx is not None else None
    early = import_time_use(source)
    if early:
        return early
    files: tuple[FileWrite, ...] = ()
    if spot is not None and not _has_inline(source):
        copy = RC.needed(spot)
        if isinstance(copy, str):
            return copy
        files = (copy,)
    if has_runtime(source):
        return (), files
    # (A file without a final newline is fine: the engine completes the last line before
    # applying whole-line edits and takes the newline away again afterwards.)
    text = RC.import_lines(spot) if spot is not None else RUNTIME
    return (RC.tail_edit(source.path, source.lines, text),), files


def import_time_use(source: SourceFile) -> Optional[str]:
    """Why module-level code may run this file's functions before its last line, or None.

    The runtime (its import, or the inline copy) and the helpers are appended at the END of the
    file, so a rewritten call site that runs while the module is still executing (an ``if
    __name__ == "__main__":`` block, ``main()`` or ``Model()(x)`` at module level) would meet
    ``NameError`` where the original ran."""
    from graphmend.transforms.base import iter_nodes

    local = {s.name.value for s in source.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    for stmt in source.module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.If) and any(n.value == "__name__" for n in iter_nodes(stmt.test, (cst.Name,))):
            return (f"the `if __name__ ...` block at line {source.line(stmt)} runs this file's code while the module "
                    "is still executing, before the runtime appended at its end is defined (NameError)")
        for call in iter_nodes(stmt, (cst.Call,)):
            root = call.func
            while isinstance(root, (cst.Attribute, cst.Call)):
                root = root.value if isinstance(root, cst.Attribute) else root.func
            if isinstance(root, cst.Name) and root.value in local and not root.value.startswith("_graphmend"):
                return (f"`{root.value}(...)` at line {source.line(stmt)} runs this file's code while the module is "
                        "still executing, before the runtime appended at its end is defined (NameError)")
    return None


def _has_inline(source: SourceFile) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == MARKER for s in source.module.body)


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
    if cls is None and outer is not None and source.parent(outer) is source.module:
        callers = _boundary_callers(source, outer.name.value)
        if callers:
            return Placement(True, f"the forward of {callers[0]}, which calls {outer.name.value}() (and of every module class in this file)")
    module = _module_name(source)
    return Placement(
        False,
        "",
        "no module class with a forward or compiled function in this file encloses the call, so no "
        "boundary is proven to run after the compiled region; at your compile site write "
        f"`compiled = {module}._graphmend_boundary(torch.compile(fn))` (for a module: "
        f"`Model.forward = {module}._graphmend_boundary(Model.forward)` before compiling)",
    )


def _module_name(source: SourceFile) -> str:
    """The dotted name a user's code imports the rewritten file as (for the notes' examples)."""
    return source.path[:-3].replace("/", ".") if source.path.endswith(".py") else source.path


def _boundary_callers(source: SourceFile, name: str) -> list[str]:
    """The module classes of this file with a ``forward`` whose methods call the module-level
    function ``name`` (directly or through other module-level functions of this file).

    Their boundary replays what ``name`` records when one of them is the compiled entry. Called
    from anywhere else under compile (another file's compiled function, a lambda), no boundary
    runs and the runtime keeps the original call (``_graphmend_defer`` records only while an
    eager boundary runs the compiled call), so the output is never lost or reordered."""
    from graphmend.transforms.base import iter_nodes

    functions = {s.name.value: s for s in source.module.body if isinstance(s, cst.FunctionDef)}

    def calls(node: cst.CSTNode) -> set[str]:
        return {c.func.value for c in iter_nodes(node, (cst.Call,)) if isinstance(c.func, cst.Name)}

    reaching = {name}
    changed = True
    while changed:  # module-level functions that reach `name`
        changed = False
        for fname, fn in functions.items():
            if fname not in reaching and calls(fn.body) & reaching:
                reaching.add(fname)
                changed = True
    forwards = set(module_classes_with_forward(source))
    return [stmt.name.value for stmt in source.module.body
            if isinstance(stmt, cst.ClassDef) and stmt.name.value in forwards and calls(stmt.body) & reaching]


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
    related = _in_graph_with(source, own.name.value) if own is not None else None
    for node in iter_nodes(source.module, (cst.If, cst.Assert, cst.Call)):
        if isinstance(node, cst.Call):
            if not (isinstance(node.func, cst.Name) and node.func.value == TRAP):
                continue
        elif isinstance(node, cst.Assert):
            if not looks_tensor_valued(node.test):
                continue
        elif not (_raises_only(node) and lowerable_condition(node.test)):
            continue
        if func is not None and enclosing_function(source, node) is func and source.line(node) < call_line \
                and not _same_loop(source, node, call, func):
            continue  # runs before the call (and not again in a later iteration of a loop around both)
        cls = _enclosing_class(source, node)
        if related is not None and cls is not None and cls.name.value not in related:
            continue  # a class never in a graph with this one
        return f"line {source.line(node)} may raise inside the same compiled graph (a tensor-valued check), and the records of a graph that raises are lost"
    if func is not None:
        for node in iter_nodes(func, (cst.Subscript, cst.Call)):
            if source.line(node) < call_line and not _same_loop(source, node, call, func):
                continue
            fault = _value_fault(node, _tensor_names(func))
            if fault:
                return (f"`{fault}` at line {source.line(node)} may fail on the values it is given (an index out of "
                        "range) inside the same compiled graph, and the records of a graph that raises are lost")
    return None


def entry_faults(source: SourceFile, call: cst.CSTNode) -> tuple[dict[str, str], tuple[str, ...]]:
    """The module classes of this file that may be the compiled entry above ``call`` and may fail
    after it in the same graph (class -> why), and those that may not.

    A caller (a module that holds this one, or this class's own forward calling the method) may
    fail after this call returned, in the same graph: ``y = self.inner(x); return y[idx]``; the
    records of a graph that raises are lost. The runtime records only under the safe entries
    (``entries=``); under the others the call runs as written."""
    from graphmend.transforms.base import iter_nodes

    func = enclosing_function(source, call)
    own = _enclosing_class(source, call)
    if own is not None:
        related = _users_of(source, own.name.value)
    elif func is not None:
        related = set(_boundary_callers(source, _outermost_function(source, call).name.value))  # type: ignore[union-attr]
        related = _users_of_all(source, related)
    else:
        related = set()
    faults: dict[str, str] = {}
    for name in sorted(related):
        for method in _related_methods(source, {name}, func):
            for node in iter_nodes(method, (cst.Subscript, cst.Call)):
                fault = _value_fault(node, _tensor_names(method))
                if fault and name not in faults:
                    faults[name] = (f"`{fault}` at line {source.line(node)} (in {name}.{method.name.value}, which may run "
                                    "after this call in the same compiled graph) may fail on the values it is given "
                                    "(an index out of range), and the records of a graph that raises are lost")
    forwards = set(module_classes_with_forward(source))
    safe = tuple(sorted(n for n in related if n in forwards and n not in faults))
    return faults, safe


def _users_of_all(source: SourceFile, names: set[str]) -> set[str]:
    found: set[str] = set()
    for name in names:
        found |= _users_of(source, name)
    return found


def _related_methods(source: SourceFile, related: set[str], func: Optional[cst.FunctionDef]) -> list[cst.FunctionDef]:
    """What a compiled call of the classes named in ``related`` runs: their ``forward`` and the
    methods it calls as ``self.name(...)``, transitively (not ``func`` itself)."""
    found = []
    for stmt in source.module.body:
        if not (isinstance(stmt, cst.ClassDef) and stmt.name.value in related):
            continue
        methods = {f.name.value: f for f in stmt.body.body if isinstance(f, cst.FunctionDef)} \
            if isinstance(stmt.body, cst.IndentedBlock) else {}
        todo, seen = ["forward"], set()
        while todo:
            name = todo.pop()
            if name in seen or name not in methods:
                continue
            seen.add(name)
            method = methods[name]
            if method is not func:
                found.append(method)
            todo.extend(c.func.attr.value for c in iter_nodes(method, (cst.Call,))
                        if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.value.value == "self")
    return found


# Calls whose validity depends on index values (an out-of-range index fails at run time).
INDEXING_CALLS = frozenset("gather scatter scatter_add scatter_reduce index_select index_add index_copy index_fill "
                           "index_put take take_along_dim embedding embedding_bag one_hot".split())


def _value_fault(node: cst.CSTNode, tensors: set[str]) -> Optional[str]:
    """The code of an operation that may fail on tensor values (not shapes), or None.

    An index that is a Python int (a loop counter, a constant) is checked by Dynamo while it
    traces, where the original's graph break would have come first anyway; what may fail inside
    a graph is an index held in a tensor: one computed by a call, or a parameter of the function
    that may be a tensor (``tensors``)."""
    from graphmend.transforms._effects import code

    if isinstance(node, cst.Call):
        leaf = node.func.attr.value if isinstance(node.func, cst.Attribute) else getattr(node.func, "value", "")
        return code(node) if leaf.rstrip("_") in INDEXING_CALLS else None
    assert isinstance(node, cst.Subscript)
    for element in node.slice:
        index = element.slice
        if not isinstance(index, cst.Index) or _constant(index.value):
            continue
        parts = index.value.elements if isinstance(index.value, cst.Tuple) else [index.value]
        for part in parts:
            value = part.value if isinstance(part, cst.Element) else part
            if isinstance(value, cst.Call) and getattr(value.func, "value", "") not in ("len", "int", "slice"):
                return code(node)
            if isinstance(value, cst.Name) and value.value in tensors:
                return code(node)
    return None


def _tensor_names(func: cst.FunctionDef) -> set[str]:
    """Parameters of ``func`` that may hold a tensor (not ``self``, not annotated int/bool)."""
    names = set()
    params = list(func.params.params) + list(func.params.posonly_params) + list(func.params.kwonly_params)
    for p in params:
        ann = p.annotation.annotation if p.annotation is not None else None
        if p.name.value in ("self", "cls") or (isinstance(ann, cst.Name) and ann.value in ("int", "bool", "str")):
            continue
        names.add(p.name.value)
    return names


def _constant(v: cst.CSTNode) -> bool:
    if isinstance(v, (cst.Integer, cst.Ellipsis, cst.SimpleString)) or (isinstance(v, cst.Name) and v.value == "None"):
        return True
    if isinstance(v, cst.UnaryOperation) and isinstance(v.operator, cst.Minus):
        return _constant(v.expression)
    if isinstance(v, cst.Tuple):
        return all(_constant(e.value) or isinstance(e.value, cst.Slice) for e in v.elements)
    return False


def _same_loop(source: SourceFile, a: cst.CSTNode, b: cst.CSTNode, func: cst.FunctionDef) -> bool:
    """Whether a ``for``/``while`` inside ``func`` holds both nodes (``a`` runs again after ``b``)."""
    from graphmend.transforms.base import iter_nodes

    for loop in iter_nodes(func, (cst.For, cst.While)):
        inside = set(map(id, iter_nodes(loop.body, (type(a), type(b)))))
        if id(a) in inside and id(b) in inside:
            return True
    return False


def state_written_before(source: SourceFile, site: cst.CSTNode) -> Optional[str]:
    """A write to state that outlives the call (an attribute, a subscript, an in-place update of
    a tensor it was given, a deferred record, a call that may do any of these) that may run in
    the same compiled graph before ``site``, or why that cannot be told; None when nothing can.
    A graph that raises inside (a lowered trap) loses such writes: Dynamo applies them when the
    graph returns.

    Only what can run between an entry's ``forward`` and the site counts (``_reach``): methods
    that never run inside it (``_init_weights``) do not. In a method or a compiled function every
    entry that reaches the site must be clean; in a module-level helper the clean entries are
    enough, because the lowered check names them (:func:`trap_entries`) and the runtime keeps the
    original check under any other."""
    from graphmend.transforms import _reach

    found = _reach.before(source, site)
    if found.blocked:
        return found.blocked
    if found.own:
        return found.own
    if trap_entries(source, site) is None:
        return next(iter(found.dirty.values()), None)
    if found.clean or not found.dirty:
        return None  # (no entry here at all: no boundary is proven, and the fix is unsafe)
    return next(iter(found.dirty.values()))


def trap_entries(source: SourceFile, site: cst.CSTNode) -> Optional[tuple[str, ...]]:
    """The compiled entries a lowered check may be lowered under: the module classes of this file
    whose every path to it writes nothing first (``_reach``), or the compiled function it is in;
    None where no entry is proven (the fix is unsafe). The runtime keeps the original check under
    any other entry — a class of another file that calls this one, a subclass, a lambda."""
    from graphmend.transforms import _reach

    outer = _outermost_function(source, site)
    if outer is None:
        return None
    if _enclosing_class(source, site) is None and outer.name.value in compiled_functions(source):
        return (outer.name.value,)
    return _reach.before(source, site).clean or None


def entries_text(entries: Sequence[str]) -> str:
    """``(__name__ + ".A", ...)``: entries named as the runtime names them, by the module the
    rewritten file is imported as (two files' classes of one name are not the same entry)."""
    return "(" + ", ".join(f"__name__ + {'.' + e!r}" for e in entries) + ("," if len(entries) == 1 else "") + ")"


def entries_argument(source: SourceFile, site: cst.CSTNode) -> str:
    """``, entries=(...)`` for a lowered check (:func:`trap_entries`); without it the runtime never lowers."""
    entries = trap_entries(source, site)
    return "" if entries is None else ", entries=" + entries_text(entries)


def try_in_callers(source: SourceFile, site: cst.CSTNode) -> Optional[cst.CSTNode]:
    """A ``try`` with handlers in a method of this file that may call into ``site``'s code (any
    method of its class, or of a class of this file that uses it): under compile its handler
    never sees the trap, which fails the whole graph."""
    from graphmend.transforms.base import iter_nodes

    own = _enclosing_class(source, site)
    if own is None:
        return None
    related = _users_of(source, own.name.value)
    for stmt in source.module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value in related:
            methods = [f for f in iter_nodes(stmt.body, (cst.FunctionDef,)) if f.name.value != "__init__"]
            for node in (t for f in methods for t in iter_nodes(f, (cst.Try,))):
                if node.handlers and not any(id(n) == id(site) for n in iter_nodes(node, (type(site),))):
                    return node
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


def _class_mentions(source: SourceFile) -> dict[str, set[str]]:
    """Each class of this file -> the names and attribute names its body mentions."""
    from graphmend.transforms.base import iter_nodes

    mentions: dict[str, set[str]] = {}
    for stmt in source.module.body:
        if isinstance(stmt, cst.ClassDef):
            mentions[stmt.name.value] = {n.value for n in iter_nodes(stmt.body, (cst.Name,))} | {
                n.attr.value for n in iter_nodes(stmt.body, (cst.Attribute,))
            }
    return mentions


def _in_graph_with(source: SourceFile, name: str) -> set[str]:
    """The classes of this file whose code may run in one compiled graph with class ``name``'s:
    the classes that use it (transitively: the compiled entry may be any of them) and every class
    those mention (transitively: their submodules, which run before or after ``name``'s code)."""
    mentions = _class_mentions(source)
    found = _users_of(source, name)
    changed = True
    while changed:
        changed = False
        for cls in list(found):
            for other in mentions:
                if other not in found and other in mentions.get(cls, ()):
                    found.add(other)
                    changed = True
    return found


def _users_of(source: SourceFile, name: str) -> set[str]:
    """``name`` and the classes of this file whose bodies mention it, transitively."""
    mentions = _class_mentions(source)
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


def unproven_entry(source: SourceFile) -> str:
    """Why a check that no compiled entry of this file reaches is not lowered (a decline reason).

    The runtime lowers a check only under the entries its call names (:func:`trap_entries`); with
    none, it keeps the Python check everywhere and the rewrite would change nothing. A compile
    site in another file cannot be proven either, even wrapped in ``_graphmend_boundary`` (which
    replays deferred calls): what the wrapped callable runs in the graph before the check is code
    this file does not hold, and a lowered check that fails loses every write made before it in
    the graph (Dynamo applies them when the graph returns)."""
    return ("no compiled entry of this file is proven to run the check (no module class with a forward or compiled "
            "function here reaches it), and the runtime lowers a check only under an entry proven to write nothing "
            "before it, so the rewrite would change nothing; a compile site elsewhere cannot be proven, even wrapped "
            f"as `compiled = {_module_name(source)}._graphmend_boundary(torch.compile(fn))` (that replays deferred "
            "prints): the fix cannot read what `fn` writes in the same graph before the check, and a lowered check "
            "that fails loses those writes")


def trap_fix(rule: str, title: str, source: SourceFile, node: cst.CSTNode, ctx: RuleContext,
             edits: tuple[Edit, ...], files: tuple[FileWrite, ...], notes: str, kept: str) -> Union[Fix, Decline]:
    """A lowered check's fix (GM301, GM303): ``safe`` only where the boundary that turns the
    in-graph assertion back into the exception is proven; ``kept`` names what stays on CUDA.
    Declined where no entry is proven (:func:`unproven_entry`): the runtime would never lower it."""
    line = source.line(node)
    mark = fingerprint(source.path, source.function_name(node), rule, source.lines[line - 1])
    if trap_entries(source, node) is None:
        return Decline(rule=rule, file=source.path, line=line, reason=unproven_entry(source), fingerprint=mark)
    safety = Safety.SAFE
    placement = plan(source, node)
    if not placement.proven:
        safety = Safety.UNSAFE
        notes += f" Unsafe: no boundary is proven to run after the compiled region ({placement.why_not})."
    if ctx.device == "cuda":
        notes += f" The target runs on CUDA, where {kept} is kept."
    return Fix(rule=rule, title=title, safety=safety, edits=edits, file=source.path, line=line, fingerprint=mark,
               notes=notes, files=files)
