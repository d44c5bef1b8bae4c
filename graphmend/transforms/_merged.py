"""What a removed graph break commits no more: the effects before it, when the merged graph fails.

GM101 and GM402 replace an ``if`` (or a conditional expression) on a tensor by a select, which
removes the graph break Dynamo made there. The graph before the break and the graph after it
become one. The original ran the first graph and committed what it did before the break: its
in-place writes to tensors the caller holds, the output the runtime makes in the graph
(``graphmend::deferred``) or records, and the Python side effects Dynamo applies when a graph
returns (``self.calls += 1``, a container's ``append``). Then it traced the rest.

When the rest fails — while Dynamo traces it (a shape, dtype or index that does not fit:
nothing of the merged graph runs) or when the graph runs (an index held in a tensor, a lowered
check: Dynamo applies no side effect of a graph that raised) — those effects are lost where the
original kept them, and the program goes on with other state (a caller that catches the error,
the next call). And a failure while tracing the rest was met, in the original, in a frame of its
own called where the program was: a ``try`` around the site caught it; without the break the
frame's compile fails where the compiled frame starts, outside that ``try``.

The facts are the ones the deferral rules (GM201-GM203) and the lowered checks (GM301) use, one
piece of code each: what may write state before a site in its compiled region, per entry
(:func:`_reach.before`); what may fail after a call, in its function and in the entries that may
run more after it (:func:`_deferral_entries._failure_in`, :func:`_region.region_may_raise`);
a ``try`` that may catch a failure found while tracing (:func:`_region.caught_around`).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms import _deferral_entries as D
from graphmend.transforms import _effects as E
from graphmend.transforms import _reach
from graphmend.transforms import _boundary as B
from graphmend.transforms import _region as R
from graphmend.transforms._analysis import dotted
from graphmend.transforms._attributes import _literal
from graphmend.transforms._boundary import enclosing_function
from graphmend.transforms.base import SourceFile, iter_nodes


def lost_effects(source: SourceFile, site: cst.CSTNode, arms: list[cst.CSTNode]) -> Optional[str]:
    """Why removing the graph break at ``site`` (an ``if`` or a conditional expression whose
    selected code is ``arms``) may lose what the original committed at it, or None: something
    after the site (the arms, the rest of its function and what that calls of this file, the
    code of an entry that may run more after it) may fail while Dynamo traces it or when the
    graph runs, and before it, under the same entry, something may write state, or a ``try``
    may catch the failure."""
    func = enclosing_function(source, site)
    if func is None:
        return None
    program = D._program(source)
    after = [n for n in D._after(source, site, func) + [n for arm in arms for n in D._runs(arm)] if not _output(n)]
    own = R.region_may_raise(source, site) or D._failure_in(program, after, func, {id(func)})
    faults: dict[str, str] = {}
    for name in sorted(R._entries_of(source, site)):
        for method in R._related_methods(source, {name}, func):
            fault = D._failure_in(program, D._runs(method.body), method, {id(func), id(method)})
            if fault:
                faults[name] = f"in {name}.{method.name.value}, which may run after the site: {fault}"
                break
    if own is None and not faults:
        return None
    failure = own or next(iter(faults.values()))
    caught = R.caught_around(source, site)
    if caught:
        return f"{_failing(failure)}; {caught}"
    shown = _Shown(source)
    found = _reach.before(source, site, shown)
    for written, fault in _pairs(shown.prefix_writes(func, site), found, own, faults):
        return (f"the graph break here commits what runs before it: {_effect(written)}; with the break removed, "
                f"{_failing(fault)}, and a merged graph that fails loses that effect, where the original kept it")
    return None


# Methods that update a list, dict or set in place (``self.cache.append(h)``).
_CONTAINER_UPDATES = frozenset("append extend insert pop popitem setdefault update clear remove add discard sort reverse".split())
# Methods of torch.nn.Module that change a module's state (``self.train(False)``, ``self.add_module(...)``).
_MODULE_UPDATES = frozenset("""train eval add_module register_module register_buffer register_parameter set_submodule apply
zero_grad load_state_dict share_memory register_forward_hook register_forward_pre_hook register_backward_hook
register_full_backward_hook register_full_backward_pre_hook""".split())
# Methods named by Python's data model that update their receiver (or, called on a class, their first argument).
_DUNDER_UPDATES = frozenset("""__setattr__ __delattr__ __setitem__ __delitem__ __iadd__ __isub__ __imul__ __imatmul__
__itruediv__ __ifloordiv__ __imod__ __ipow__ __iand__ __ior__ __ixor__ __ilshift__ __irshift__""".split())


def _updates(method: str) -> bool:
    """Whether a method of this name may update its receiver in place (``mul_``, ``append``, ``__imul__``, ``eval``)."""
    return (method.endswith("_") and not method.endswith("__")) or method in _CONTAINER_UPDATES | _DUNDER_UPDATES | _MODULE_UPDATES


def _bound_methods(fn: cst.FunctionDef, name: cst.Name) -> list[cst.Attribute]:
    """The methods ``name`` is bound to in ``fn`` (``f = x.mul_``)."""
    return [node.value for node in iter_nodes(fn.body, (cst.Assign,)) if isinstance(node.value, cst.Attribute)
            and any(isinstance(t.target, cst.Name) and t.target.value == name.value for t in node.targets)]


class _Shown(_reach._Program):
    """The file's program, counting the writes its code shows: an in-place update (``x.mul_(2)``,
    ``out=``, ``inplace=``, a submodule of the class built with ``inplace=True``), a store into an
    attribute, item or global (``self.calls += 1``), a container's update, a record. Code it does
    not read (a submodule or function of another file, a callable held in a variable) is followed
    where it resolves and otherwise not counted: GM101 would decline every model whose layers are
    built from a table (``BART_ATTENTION_CLASSES[...]``, ``ACT2FN[...]``), and an error of the
    merged graph reaches the caller as the original's did; what such code writes before the
    site is the limit of this judgement (a strict expected failure in
    ``tests/transforms/test_removed_break_effects.py`` names it)."""

    def callees(self, call: cst.Call, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        targets, why = super().callees(call, owner)
        return targets, why if why and self._shows_write(call, owner) else ""

    def attribute_read(self, node: cst.Attribute, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        return super().attribute_read(node, owner)[0], ""

    def _shows_write(self, call: cst.Call, owner: Optional[str]) -> bool:
        func = call.func
        if isinstance(func, cst.Call) and isinstance(func.func, cst.Name) and func.func.value == "_graphmend_deferred":
            return True  # a record
        fn = enclosing_function(self.source, call)
        if isinstance(func, cst.Name) and func.value in ("setattr", "delattr") and call.args:
            # ``setattr(self, "calls", n)`` stores as ``self.calls = n`` does
            return not self._own(fn, E.roots(call.args[0].value))
        if isinstance(func, cst.Call) and dotted(func.func) == "getattr" and len(func.args) >= 2:
            # ``getattr(x, "mul_")(2)`` runs ``x.mul_(2)``; a name computed at run time may be any method
            attr = _literal(func.args[1].value)
            return attr is None or _updates(attr) and not self._own(fn, E.roots(func.args[0].value))
        bound = _bound_methods(fn, func) if isinstance(func, cst.Name) and fn is not None else []
        if any(_updates(b.attr.value) and not self._own(fn, E.roots(b.value)) for b in bound):
            return True  # ``f = x.mul_; f(2)``
        if isinstance(func, cst.Attribute) and (func.attr.value in _DUNDER_UPDATES or (
                dotted(func.value) == "operator" and f"__{func.attr.value}__" in _DUNDER_UPDATES)):
            # ``x.__imul__(2)``, ``object.__setattr__(self, "calls", n)``, ``operator.imul(x, 2)``: the
            # receiver or the first argument
            return not self._own(fn, E.roots(func.value) | (E.roots(call.args[0].value) if call.args else set()))
        kind, name = self.t.func(func)
        inplace = E._inplace_flag(call) or any(a.keyword is not None and a.keyword.value == "out" for a in call.args) \
            or (name.endswith("_") and not name.endswith("__"))
        if inplace or (kind == "method" and name in _CONTAINER_UPDATES | _MODULE_UPDATES):
            # a tensor or container every binding of which is made here (``y = x * 1; y.mul_(2)``,
            # ``out = []; out.append(h)``) is the function's own: a failure drops it with the frame
            if inplace:
                written = E.call_writes(call, self.t, E.Modules(), frozenset())[0]
            else:
                written = E.roots(func.value)  # type: ignore[attr-defined]
            return not self._own(fn, written)
        own = E._is_self_module(call)
        return own is not None and owner in self.classes and own in E.Modules(self.classes[owner]).writers

    def _own(self, fn: Optional[cst.FunctionDef], written: set[str]) -> bool:
        """Whether the values ``written`` are locals of ``fn`` every binding of which is made there."""
        return bool(written) and fn is not None and all(_reach._fresh_local(fn, r, self.t) for r in written)


def _pairs(own_write: Optional[str], found: _reach.Before, own: Optional[str], faults: dict[str, str]):
    """(write before, failure after) under one entry: the site's function's own writes with what
    may fail under any entry, and each entry whose callers may write before the site with what
    may fail under it (callers that cannot be enumerated are not counted)."""
    if own_write and (own or faults):
        yield own_write, own or next(iter(faults.values()))
    if found.blocked:
        return
    for entry, written in found.dirty.items():
        if own or entry in faults:
            yield written, own or faults[entry]


def _output(node: cst.CSTNode) -> bool:
    """An output call (``print``, a deferred call): a graph break or an op that does not fail."""
    from graphmend.transforms._deferral import _is_output

    return isinstance(node, cst.Call) and (_is_output(node) or (
        isinstance(node.func, cst.Call) and dotted(node.func.func) == B.DEFERRED))


def _effect(written: str) -> str:
    return written.removesuffix(" " + _reach.LOST)


def _failing(fault: str) -> str:
    """A failure's reason (written for a deferred call) as said of the code after a site."""
    return fault.replace("after the call", "after the site")
