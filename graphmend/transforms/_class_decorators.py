"""Whether a class decorator keeps the methods a class body shows (for ``_mro``'s lookup).

``_mro`` reads a class's body as its methods. A class decorator runs when the class is made and
may replace a method or add one (``cls.head_mask = ...``), so a decorated class is read as its
body only where the decorator is shown to return the class it is given with nothing changed but
its ``__doc__``:

* a decorator of the package, resolved through the file's imports, whose code is read: its body
  (or, for ``@factory(...)``, the body of the one function the factory defines and returns) is
  docstrings, stores of ``<param>.__doc__`` and ``return <param>``, nothing else
  (:func:`_doc_only`);
* transformers' docstring decorators, read in the installed transformers 4.52.4 and trusted by
  name (:data:`VERIFIED`): ``auto_docstring`` (``utils/args_doc.py``: a class goes to
  ``auto_class_docstring``, which sets ``cls.__doc__`` and the ``__doc__`` of its ``__init__``
  function through ``auto_method_docstring`` and returns ``cls``) and ``add_start_docstrings``
  (``utils/doc.py``: sets ``fn.__doc__``, returns ``fn``). They are trusted where the name is
  imported from ``transformers`` or is the definition in ``transformers/utils`` (the package
  itself, copied as a repository's source); their code is too large to read as above.

Any other decorator is a reason, and so is a ``from ... import *`` or a ``globals()`` after a
binding of its name, in the class's file, the decorator's or one in between (:func:`_rebound`):
it may bind the name again, to a decorator not read.
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from graphmend.transforms.base import iter_nodes

# text without which a file binds no name again after its binding (a cheap test before the walk)
_REBINDING = re.compile(r"import[\s\\]*\*|globals")
# name -> the file of transformers (4.52.4) whose definition was read
VERIFIED = {"auto_docstring": "transformers/utils/args_doc.py", "add_start_docstrings": "transformers/utils/doc.py"}


def decorator_reason(hierarchy, path: str, cls: cst.ClassDef) -> Optional[str]:
    """Why a decorator of ``cls`` (defined in ``path``) may replace or add its methods, or None."""
    for d in cls.decorators:
        expr = d.decorator
        callee = expr.func if isinstance(expr, cst.Call) else expr
        shown = _code(expr)
        if not isinstance(callee, cst.Name):
            return f"is decorated (`@{shown}`: a decorator not resolved, which may replace or add methods)"
        name = callee.value
        rebound = _rebound(hierarchy, path, name)
        if rebound:
            return f"is decorated (`@{shown}`: {rebound}, which may replace or add methods)"
        found = hierarchy.class_named(path, name, want=cst.FunctionDef)
        if isinstance(found, str):
            if name in VERIFIED and _imported_from_transformers(hierarchy.read(path), name):
                continue
            return f"is decorated (`@{shown}`: {found}; it may replace or add methods)"
        if found[1] in VERIFIED and found[0].endswith(VERIFIED[found[1]]):
            continue
        source = hierarchy.read(found[0])
        func = next((s for s in source.module.body if isinstance(s, cst.FunctionDef) and s.name.value == found[1]), None) \
            if not isinstance(source, str) else None
        if func is None or not _doc_only(func, factory=isinstance(expr, cst.Call)):
            return (f"is decorated (`@{shown}`, defined in {found[0]}: its code does more than set the class's "
                    "__doc__ and may replace or add methods)")
    return None


def _rebound(hierarchy, path: str, name: str, depth: int = 0) -> Optional[str]:
    """Where the one module-level binding of ``name`` in ``path`` (followed through the files that
    import it, as ``_mro`` resolves it) may be bound again when the module runs: a ``from ... import *``
    or a ``globals()`` after it (``try: from ._fast import *``), or None."""
    source = hierarchy.read(path)
    if isinstance(source, str):
        return None
    scope = source.scopes.get(source.module)
    bindings = [b.node for b in scope.assignments[name]] if scope is not None and name in scope else []
    if len(bindings) != 1:
        return None  # a reason of the lookup
    if not _REBINDING.search(source.text):
        return _rebound_where_imported(hierarchy, path, bindings[0], name, depth)
    after = False
    for node in iter_nodes(source.module, (cst.ImportFrom, cst.Call, type(bindings[0]))):
        if node is bindings[0]:
            after = True
        elif after and (isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) or isinstance(
                node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "globals"):
            return f"`{_code(node).strip()}` in {path} may bind `{name}` again"
    return _rebound_where_imported(hierarchy, path, bindings[0], name, depth)


def _rebound_where_imported(hierarchy, path: str, node: cst.CSTNode, name: str, depth: int) -> Optional[str]:
    """:func:`_rebound` in the file of the package the binding ``node`` of ``name`` imports it from."""
    if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) and depth < 8:
        for alias in node.names:
            bound = alias.asname.name.value if alias.asname is not None else alias.name.value  # type: ignore[union-attr]
            if bound == name and isinstance(alias.name, cst.Name):
                module = _code(node.module) if node.module is not None else ""
                target = hierarchy._module_file(path, len(node.relative), module)
                return _rebound(hierarchy, target, alias.name.value, depth + 1) if target is not None else None
    return None


def _imported_from_transformers(source, name: str) -> bool:
    """Whether ``name`` is bound in ``source`` by ``from transformers... import name`` alone."""
    if isinstance(source, str):
        return False
    scope = source.scopes.get(source.module)
    bindings = list(scope.assignments[name]) if scope is not None and name in scope else []
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.ImportFrom):
        return False
    node = bindings[0].node
    module = _code(node.module) if node.module is not None else ""
    return not node.relative and (module == "transformers" or module.startswith("transformers.")) and any(
        isinstance(a.name, cst.Name) and a.name.value == name and a.asname is None
        for a in node.names if isinstance(a, cst.ImportAlias))


def _doc_only(func: cst.FunctionDef, factory: bool) -> bool:
    """Whether ``func`` returns its one argument with only its ``__doc__`` set; for a ``factory``,
    whether it defines one such function and returns it (its own statements docstrings)."""
    if func.decorators or not isinstance(func.body, cst.IndentedBlock):
        return False
    body = [s for s in func.body.body if not _docstring(s)]
    if factory:
        inner = [s for s in body if isinstance(s, cst.FunctionDef)]
        rest = [s for s in body if not isinstance(s, cst.FunctionDef)]
        return len(inner) == 1 and len(rest) == 1 and _returns(rest[0], inner[0].name.value) \
            and _doc_only(inner[0], factory=False)
    params = func.params
    if len(params.params) != 1 or params.posonly_params or params.kwonly_params or params.star_kwarg \
            or isinstance(params.star_arg, cst.Param):
        return False
    given = params.params[0].name.value
    if not body or not _returns(body[-1], given):
        return False
    for stmt in body[:-1]:
        small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []
        if len(small) != 1 or not isinstance(small[0], cst.Assign) or len(small[0].targets) != 1:
            return False
        target = small[0].targets[0].target
        if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == given
                and target.attr.value == "__doc__") or not _reads_doc_only(small[0].value, given):
            return False
    return True


def _reads_doc_only(value: cst.BaseExpression, given: str) -> bool:
    """Whether ``value`` uses the decorated object only as ``<given>.__doc__`` or ``.__name__``."""
    allowed = set()
    for node in _walk(value):
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == given \
                and node.attr.value in ("__doc__", "__name__", "__qualname__"):
            allowed.add(id(node.value))
    return all(id(n) in allowed for n in _walk(value) if isinstance(n, cst.Name) and n.value == given)


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _returns(stmt: cst.CSTNode, name: str) -> bool:
    small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []
    return len(small) == 1 and isinstance(small[0], cst.Return) and isinstance(small[0].value, cst.Name) \
        and small[0].value.value == name


def _docstring(stmt: cst.CSTNode) -> bool:
    small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []
    return len(small) == 1 and isinstance(small[0], cst.Expr) and isinstance(small[0].value, (cst.SimpleString,
                                                                                              cst.ConcatenatedString))


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
