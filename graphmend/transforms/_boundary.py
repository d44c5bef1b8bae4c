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
* small libcst helpers the rules share (positions, textual wrapping of an expression), and how
  the runtime names an entry (:func:`entries_text`).

What may fail in a region after a deferred call, and which classes share a graph, is
``_region``; lowering a check into the graph (its entries and its fix) is ``_trap``.

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

from graphmend.model import Edit, FileWrite
from graphmend.transforms import _runtime_copy as RC
from graphmend.transforms.base import RuleContext, SourceFile

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


def runtime_edits(source: SourceFile, ctx: Optional[RuleContext] = None,
                  site: Optional[cst.CSTNode] = None) -> Union[tuple[tuple[Edit, ...], tuple[FileWrite, ...]], str]:
    """What a fix adds for the runtime: (edits, files), or why it cannot (a hand-edited copy).

    In a package (``ctx.runtime``): two lines at the end of the file importing the package's
    runtime copy, and that copy as a whole file. Elsewhere: the compact runtime itself at the
    end (:data:`RUNTIME`). The edit is the same for every fix of the file, so the engine merges
    it; it is an insertion after the last line, so no original line moves. Nothing is added to
    a file that has the runtime already.
    """
    spot = ctx.runtime if ctx is not None else None
    early = import_time_use(source, site)
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


def import_time_use(source: SourceFile, site: Optional[cst.CSTNode] = None) -> Optional[str]:
    """Why module-level code may run this file's functions before its last line, or None.

    The runtime (its import, or the inline copy) and the helpers are appended at the END of the
    file, so a rewritten call site that runs while the module is still executing (an ``if
    __name__ == "__main__":`` block, ``main()`` or ``Model()(x)`` at module level) would meet
    ``NameError`` where the original ran. Given the ``site`` (in a plain method of a class of this
    file), a call of a function or class of this file whose code never names that class nor one
    of its subclasses here (:func:`_may_reach`) is no reason: without the class no instance is
    made, so the method does not run (transformers' ``ALL_ATTENTION_FUNCTIONS =
    AttentionInterface()`` in modeling_utils.py)."""
    from graphmend.transforms.base import iter_nodes

    local = {s.name.value for s in source.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    # names module-level code binds to a value that names one of them (``X = Model``, a registry
    # ``{"m": Model}``, ``for cls in (Model,)``): a call through one may run any of its code
    aliases: set[str] = set()
    for stmt in source.module.body:
        if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and any(
                n.value in local | aliases for n in iter_nodes(stmt, (cst.Name,))):
            for target in iter_nodes(stmt, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.AsName,
                                            cst.NamedExpr, cst.CompFor)):
                aliases.update(n.value for n in iter_nodes(target.target if not isinstance(target, cst.AsName)
                                                           else target.name, (cst.Name,)))
    for stmt in source.module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.If) and any(n.value == "__name__" for n in iter_nodes(stmt.test, (cst.Name,))):
            return (f"the `if __name__ ...` block at line {source.line(stmt)} runs this file's code while the module "
                    "is still executing, before the runtime appended at its end is defined (NameError)")
        for call in iter_nodes(stmt, (cst.Call,)):
            root, docstring = call.func, False
            while isinstance(root, (cst.Attribute, cst.Call, cst.Subscript)):
                # a method of a docstring (``Model.method.__doc__.format(...)``): a str's, or None's
                docstring = docstring or (root is not call.func and isinstance(root, cst.Attribute)
                                          and root.attr.value == "__doc__")
                root = root.func if isinstance(root, cst.Call) else root.value
            if isinstance(root, cst.Name) and root.value in aliases - local and not root.value.startswith("_graphmend"):
                return (f"`{source.module.code_for_node(call.func)}(...)` at line {source.line(stmt)} may run this file's code (`{root.value}` "
                        "is bound to a value that names it) while the module is still executing, before the runtime "
                        "appended at its end is defined (NameError)")
            if isinstance(root, cst.Name) and root.value in local and not root.value.startswith("_graphmend") \
                    and not docstring and not (site is not None and root is call.func
                                               and not _may_reach(source, call, site)):
                return (f"`{root.value}(...)` at line {source.line(stmt)} runs this file's code while the module is "
                        "still executing, before the runtime appended at its end is defined (NameError)")
    return None


def _may_reach(source: SourceFile, call: cst.Call, site: cst.CSTNode) -> bool:
    """Whether a module-level ``call`` of a function or class of this file may run the method
    around ``site``: True unless that method is an undecorated method of a module-level class
    whose name, and its subclasses' here, are never read by the call (its arguments included),
    by the code of what it calls, nor by the functions and classes of this file that code names
    (followed by name)."""
    from graphmend.transforms._analysis import dotted
    from graphmend.transforms.base import iter_nodes

    func = enclosing_function(source, site)
    cls = _enclosing_class(source, site)
    if func is None or cls is None or func.decorators or source.parent(cls) is not source.module \
            or source.parent(source.parent(func)) is not cls:
        return True
    defs: dict[str, list[cst.CSTNode]] = {}
    for s in source.module.body:
        if isinstance(s, (cst.FunctionDef, cst.ClassDef)):
            defs.setdefault(s.name.value, []).append(s)
    owners, changed = {cls.name.value}, True
    while changed:  # the class and its subclasses of this file
        changed = False
        for n, nodes in defs.items():
            if n not in owners and any(isinstance(d, cst.ClassDef) and any(
                    dotted(b.value).split(".")[-1] in owners for b in d.bases) for d in nodes):
                owners.add(n)
                changed = True
    todo: list[cst.CSTNode] = [call]
    seen: set[str] = set()
    while todo:
        for ref in iter_nodes(todo.pop(), (cst.Name,)):
            if ref.value in owners:
                return True
            if ref.value in defs and ref.value not in seen:
                seen.add(ref.value)
                todo.extend(defs[ref.value])
    return False


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


def entries_text(entries: Sequence[str]) -> str:
    """``(__name__ + ".A", ...)``: entries named as the runtime names them, by the module the
    rewritten file is imported as (two files' classes of one name are not the same entry)."""
    return "(" + ", ".join(f"__name__ + {'.' + e!r}" for e in entries) + ("," if len(entries) == 1 else "") + ")"


def _enclosing_class(source: SourceFile, node: cst.CSTNode) -> Optional[cst.ClassDef]:
    cur = source.parent(node)
    while cur is not None and not isinstance(cur, cst.ClassDef):
        cur = source.parent(cur)
    return cur


def module_binds(source: SourceFile, name: str) -> bool:
    """Whether ``name`` is bound at module level (def, class, assignment, import)."""
    scope = source.scopes.get(source.module)
    if scope is None:
        return False
    return bool(scope.assignments[name]) if name in scope else False
