"""Lowering a tensor check into the graph (GM301, GM303): under which entries, and the fix.

A lowered check (``_graphmend_trap``) is an in-graph ``torch._assert_async`` the boundary turns
back into the original exception. A graph that fails loses the state it wrote before the check
(Dynamo applies writes when the graph returns), and a ``try`` around the call would not see the
original exception; so the check is lowered only under the entries whose every path to it writes
nothing first (``_reach``, ``_callback``) and the runtime keeps the Python check under any other.
"""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from graphmend.model import Decline, Edit, FileWrite, Fix, Safety, fingerprint
from graphmend.transforms._boundary import (_enclosing_class, _module_name, _outermost_function, compiled_functions,
                                            entries_text, plan)
from graphmend.transforms._region import _users_of
from graphmend.transforms.base import RuleContext, SourceFile, iter_nodes


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


def entries_argument(source: SourceFile, site: cst.CSTNode) -> str:
    """``, entries=(...)`` for a lowered check (:func:`trap_entries`); without it the runtime never lowers."""
    entries = trap_entries(source, site)
    return "" if entries is None else ", entries=" + entries_text(entries)


def try_in_callers(source: SourceFile, site: cst.CSTNode) -> Optional[cst.CSTNode]:
    """A ``try`` with handlers in a method of this file that may call into ``site``'s code (any
    method of its class, or of a class of this file that uses it): under compile its handler
    never sees the trap, which fails the whole graph."""
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
