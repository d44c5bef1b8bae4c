"""What may fail inside a compiled region after a call, and which module classes share a graph.

A deferred call (GM201-GM203) is a record in the graph's side effects: Dynamo applies them when the
graph returns, so a graph that fails after the call loses it. What may fail there is an in-graph
check — a lowered trap, or a ``raise``/``assert`` on a tensor condition that GM301/GM303 may lower
(:func:`lowerable_condition`, :func:`looks_tensor_valued`) — or an operation that faults on the
values it is given (an index out of range: :func:`_value_fault`). The classes whose code may run in
one graph with a class are those that hold it as a submodule (transitively) and those it holds
(:func:`_in_graph_with`, :func:`_users_of`). ``_trap`` uses the same helpers for the checks it lowers.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms._boundary import (TRAP, _boundary_callers, _enclosing_class, _outermost_function,
                                            enclosing_function, module_classes_with_forward)
from graphmend.transforms.base import SourceFile, iter_nodes


TENSOR_METHODS = frozenset(
    "any all item sum max min mean amax amin equal allclose isnan isinf isfinite count_nonzero "
    "nonzero numel_nonzero norm abs".split()
)


def looks_tensor_valued(expr: cst.CSTNode) -> bool:
    """Whether an expression reads tensor values (a reduction, a torch call, a lowered trap).

    Used to tell a data-dependent ``raise`` (one Dynamo turns into a graph break or an in-graph
    assertion) from an argument check on Python values, which Dynamo resolves while tracing.
    """
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
    func = enclosing_function(source, call)
    related = _entries_of(source, call)
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


def _entries_of(source: SourceFile, call: cst.CSTNode) -> set[str]:
    """The module classes of this file whose compiled call may run ``call``: its class and the
    classes that use it, or those that call its module-level function."""
    func = enclosing_function(source, call)
    own = _enclosing_class(source, call)
    if own is not None:
        return _users_of(source, own.name.value)
    if func is not None:
        return _users_of_all(source, set(_boundary_callers(source, _outermost_function(source, call).name.value)))  # type: ignore[union-attr]
    return set()


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

    What may fail inside a graph is an index held in a tensor: one computed by a call, or a
    parameter of the function that may be a tensor (``tensors``). An index that is a Python int
    (a loop counter, a constant) is checked by Dynamo while it traces: a failure there builds no
    graph, so the output made in it before is lost too (unless the runtime makes it from the failed
    trace), while the original's graph break made it first: the rules check those with
    ``_deferral_entries._trace_fault``."""
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
    for loop in iter_nodes(func, (cst.For, cst.While)):
        inside = set(map(id, iter_nodes(loop.body, (type(a), type(b)))))
        if id(a) in inside and id(b) in inside:
            return True
    return False


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
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if any(isinstance(c.func, cst.Name) and c.func.value == "len" for c in iter_nodes(test, (cst.Call,))):
        return False  # len() of a (dynamic-shape) tensor is a Python int
    return looks_tensor_valued(test)


def _class_mentions(source: SourceFile) -> dict[str, set[str]]:
    """Each class of this file -> the names and attribute names its body mentions."""
    mentions: dict[str, set[str]] = {}
    for stmt in source.module.body:
        if isinstance(stmt, cst.ClassDef):
            mentions[stmt.name.value] = {n.value for n in iter_nodes(stmt.body, (cst.Name,))} | {
                n.attr.value for n in iter_nodes(stmt.body, (cst.Attribute,))
            }
    return mentions


# Exceptions a handler may name that a compile's failure (TorchRuntimeError, BackendCompilerFailed:
# RuntimeErrors) is none of; any other name (Exception, RuntimeError, a name of another module)
# may catch it.
_NOT_A_COMPILE_FAILURE = frozenset("""
KeyError ValueError IndexError TypeError AttributeError ImportError ModuleNotFoundError StopIteration LookupError
ArithmeticError ZeroDivisionError OverflowError OSError FileNotFoundError AssertionError NameError UnicodeError
KeyboardInterrupt GeneratorExit
""".split())


def caught_around(source: SourceFile, call: cst.CSTNode) -> Optional[str]:
    """Why a failure found while tracing the code after ``call`` may be one the program catches, or
    None. Dynamo raises such a failure where the compiled frame starts. The original broke its graph
    at ``call``, so the code after it was traced as a frame of its own, called where the program
    was: inside a ``try`` around it, the ``try``'s handler caught the failure and the program went
    on. With the break removed the frame's compile fails outside that ``try``. So: a ``try`` whose
    handler may catch a RuntimeError, around ``call`` in its function, or around any call in a
    class that may run this one's code (its own included) or, outside a class, anywhere."""
    def catches(t: cst.CSTNode) -> bool:
        # ``except torch._dynamo.exc.TorchRuntimeError``: its names include ``torch``, not listed
        return any(h.type is None or any(n.value not in _NOT_A_COMPILE_FAILURE for n in iter_nodes(h.type, (cst.Name,)))
                   for h in t.handlers)  # type: ignore[attr-defined]

    func = enclosing_function(source, call)
    own = _enclosing_class(source, call)
    users = _users_of(source, own.name.value) if own is not None else None
    for t in iter_nodes(source.module, (cst.Try, cst.TryStar)):
        if not t.handlers or not catches(t):  # type: ignore[attr-defined]
            continue
        around = any(n is call for n in iter_nodes(t.body, (cst.Call,)))  # type: ignore[attr-defined]
        cls = _enclosing_class(source, t)
        if around or (any(True for _ in iter_nodes(t.body, (cst.Call,))) and enclosing_function(source, t) is not func  # type: ignore[attr-defined]
                      and (users is None or (cls is not None and cls.name.value in users))):
            return (f"the `try` at line {source.line(t)} may catch a failure found while tracing the code after the call "
                    "(a frame of its own, called inside the `try`, where the original broke its graph at the call); "
                    "without the break that frame's compile fails where the compiled frame starts, outside the `try`")
    return None


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
