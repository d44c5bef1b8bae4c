"""Who calls a function of this file: the (function, call) pairs ``_reach`` walks back through.

A function's callers are found by reading every reference to it: a module-level function by its
name, a method by ``self.name(...)``/``super().name(...)`` in its class's family, a ``forward``
also by each ``self.attr(...)`` whose attribute is built from its class (``self.attr = Cls(...)``).
A reference that is not a plain call (the function passed around as a value, a module list, a
call inside a nested function or lambda) means its callers cannot all be found: the caller of
:func:`callers` blocks every entry then. Calls at module level run on import, not under compile.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms._effects import code, dotted
from graphmend.transforms.base import SourceFile, iter_nodes


def callers(program, fn: cst.FunctionDef, owner: Optional[str]) -> tuple[list[tuple[cst.FunctionDef, cst.Call]], str]:
    """The (function, call) pairs of this file that call ``fn``, and why they cannot all be
    found (a reference that is not a plain call), if so. Calls at module level run on import,
    not under compile."""
    from graphmend.transforms._boundary import _outermost_function

    source = program.source
    name = fn.name.value
    found: list[tuple[cst.FunctionDef, cst.Call]] = []
    if owner is None:
        for n in iter_nodes(source.module, (cst.Name,)):
            if n.value != name or n is fn.name:
                continue
            parent = source.parent(n)
            if isinstance(parent, cst.Attribute) and parent.attr is n:
                continue
            g = _outermost_function(source, n)
            if isinstance(parent, cst.Call) and parent.func is n:
                if g is not None and _innermost(source, n) is not g:
                    return [], f"{name} is called at line {source.line(n)} in a nested function, whose calls are not followed"
                if g is not None:
                    found.append((g, parent))
                continue
            return [], f"{name} is used at line {source.line(n)} other than by a call, so its callers cannot all be found"
        return found, ""
    family = program.subclasses(owner) | program._ancestors(owner)
    for n in iter_nodes(source.module, (cst.Attribute,)):
        if n.attr.value != name:
            continue
        parent = source.parent(n)
        g = _outermost_function(source, n)
        cls = program.owner.get(id(g)) if g is not None else None
        via_self = dotted(n.value) == "self" and cls in family
        via_super = _is_super(n.value) and cls in family
        if not (via_self or via_super) or not (isinstance(parent, cst.Call) and parent.func is n):
            if name == "forward" and (via_self or via_super or dotted(n.value) != "self"):
                return [], f"`{code(n)}` at line {source.line(n)} may run {owner}.forward other than as a module call"
            if name != "forward":
                return [], f"`{code(n)}` at line {source.line(n)} may reach {owner}.{name} other than by `self.{name}(...)`"
            continue
        assert g is not None and cls is not None
        if _innermost(source, n) is not g:
            return [], f"`{code(parent)}` at line {source.line(n)} is in a nested function, whose calls are not followed"
        if via_self:
            targets = program.dispatch(cls, name)[0]
        else:
            targets = [f for b in program.bases(cls) for f in [program.resolve(b, name)] if f is not None]
        if any(t is fn for t in targets):
            found.append((g, parent))
    if name == "forward":
        mine = program.subclasses(owner)
        for c in sorted(program.classes):
            held = 0
            for g in program.methods(c).values():
                for call in iter_nodes(g, (cst.Call,)):
                    f = call.func
                    if isinstance(f, cst.Attribute) and dotted(f.value) == "self":
                        kinds = program.submodule(c, f.attr.value)
                        if kinds and set(kinds) & mine:
                            if _innermost(source, call) is not g:
                                return [], f"`{code(call)}` at line {source.line(call)} is in a nested function, whose calls are not followed"
                            found.append((g, call))
            for node in iter_nodes(program.classes[c].body, (cst.Assign,)):
                if isinstance(node.value, cst.Call) and dotted(node.value.func) in mine and all(
                        isinstance(t.target, cst.Attribute) and dotted(t.target.value) == "self" for t in node.targets):
                    held += 1
            mentions = sum(1 for n in iter_nodes(program.classes[c].body, (cst.Name,))
                           if n.value in mine and not _type_check(source, n))
            if c not in mine and mentions != held:
                return [], (f"{c} refers to {owner} other than as `self.name = {owner}(...)` (a module list, a "
                            "type check), so the calls of its forward cannot all be found")
    return found, ""


def _innermost(source: SourceFile, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    cur = source.parent(node)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Lambda)):
        cur = source.parent(cur)
    return cur


def _type_check(source: SourceFile, name: cst.Name) -> bool:
    """Whether ``name`` is only read as a type: ``isinstance(x, Name)``, an annotation."""
    cur = source.parent(name)
    while isinstance(cur, (cst.Element, cst.Tuple, cst.Subscript, cst.SubscriptElement, cst.Index, cst.Attribute)):
        cur = source.parent(cur)
    if isinstance(cur, cst.Annotation):
        return True
    if isinstance(cur, cst.Arg):
        call = source.parent(cur)
        return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in ("isinstance", "issubclass")
                and len(call.args) == 2 and call.args[1] is cur)
    return False


def _is_super(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "super"
