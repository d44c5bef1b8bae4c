"""Later uses: what the code after a predicated site does with the values the site made or read.

``torch.where(c, a, b)`` (GM101, GM402) computes the same values as the ``if`` it replaces, but it
is not the same object graph, and the code after the site can tell:

- **layout** (:func:`layout_use`): the select's strides come from TensorIterator (the condition,
  then the first arm decide the order of dimensions), not from the branch taken. ``a`` may be a
  transposed view and ``b`` contiguous: ``out.view(-1)`` then raises (or stops raising),
  ``out.stride()``, ``out.is_contiguous()``, ``out.data_ptr()`` read something else, and a
  ``reshape``/``flatten``/``contiguous`` copies where it made a view, so that an in-place update
  of the select or of its result no longer reaches the other (:data:`COPY_OR_VIEW`). Anything computed
  from the selected value inherits its layout (elementwise ops keep their operand's strides), so the analysis follows the values
  assigned from it. A direct layout read of any of them declines the site; so does handing one
  to a call this module does not know, or letting one leave the function (returned, stored),
  when the arms evidently differ in layout (:func:`evident_layouts`). ``.contiguous()`` is no
  cure: it returns the tensor itself when it is already contiguous, so the strides still
  differ on the other path.
- **saved tensors** (:func:`saved_written`): autograd saves the operands of most ops for the
  backward pass (``h * h`` saves ``h``, ``h.clamp(...)`` saves ``h``, ``torch.where`` saves its
  condition), and the version counter makes backward raise when a saved tensor was updated in
  place afterwards. The arm not taken now runs and saves its operands too, and a compiled
  backward may compute the condition again from what it was computed from (``~flag``): an in-place
  update after the site of anything the condition or an arm reads is declined while gradients
  can flow (:func:`later_write` follows the updates ``_effects.later_write`` does not: through
  ``.detach()``, a ``torch._foreach_*_`` list, ``getattr``, a walrus, a lambda, a closure). A
  name the site itself binds (``h = h.clamp(...)``, then ``h.add_(1)``) names the new tensor
  after the site, so a write through it is not one; the tensor it held before may still be
  written through another name (``g = h`` before the site, ``g.add_(1)`` after), which counts.
- **printing** (:func:`printed`): a tensor that requires grad prints its ``grad_fn``
  (``grad_fn=<WhereBackward0>`` after the rewrite, the branch's own before). A selected value
  printed, formatted, logged, raised, asserted with or read for its ``grad_fn`` after the site,
  itself or through a name or container that holds it (``residual = y``, ``outs.append(y)``,
  ``for t in (y,)``: :class:`_Holders`), is declined unless autograd is provably off around the
  site (a call the analysis cannot read is not counted, as a returned value is not).

- **identity** (:func:`alias_hazard`, :func:`outside_roots`): the select is a new tensor where
  the original kept an existing one (the caller's argument, a buffer, another alias), so a later
  in-place update through another name, or the caller, would no longer reach it, and a later
  ``is`` or ``id()`` would find another object (:func:`identity_read`).

"After the site" (:class:`After`) is later in the text, a loop around the site, or the body of a
nested function named after the site; the names bound from the selected value after it
(:func:`derived`, :class:`_Holders`) follow assignments, ``for`` and comprehension targets,
walruses, containers' keeping methods and the lambdas ``map`` hands it to.

Each function returns why (naming the later use and its line) or None. Everything is read from
the source; what is not known (an unknown call, a name bound again after the site) is taken at
its worst.
"""

from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

from graphmend.transforms import _analysis as A
from graphmend.transforms import _effects as E
from graphmend.transforms.base import SourceFile

# Tensor methods whose result depends on the strides, not only on the values: ``view`` raises
# for some layouts, the others read the layout or the storage itself.
STRIDE_METHODS = frozenset("""
view view_as stride is_contiguous data_ptr storage untyped_storage storage_offset as_strided
numpy is_non_overlapping_and_dense is_set_to set_ resize_ resize_as_ __array__ __dlpack__
""".split())
# torch functions that read the layout of their tensor argument.
STRIDE_FUNCS = frozenset("as_strided as_strided_ from_dlpack".split())
# Ops that make, or may make, a value whose strides differ from their operand's (a view with
# other strides, a fresh contiguous result of a reduction or product, an explicit memory format).
LAYOUT_OPS = frozenset("""
contiguous transpose permute t movedim moveaxis swapaxes swapdims view view_as reshape reshape_as
flatten unflatten ravel narrow expand expand_as as_strided unfold diagonal select squeeze unsqueeze
split chunk unbind tensor_split cat concat concatenate stack matmul mm bmm einsum linear
repeat tile broadcast_to
""".split())
LAYOUT_ATTRS = frozenset("T mT H mH".split())
# Builtins and functions that print or format their arguments.
PRINTING_BUILTINS = frozenset("print str repr format ascii".split())
# Logger and warnings calls (``logger.info(...)``, ``logging.warning(...)``, ``warnings.warn``).
PRINTING_METHODS = frozenset("""
debug info warning warn error critical exception log warning_once info_once write writelines format pprint pformat
""".split())


def _position(positions, node: cst.CSTNode) -> tuple[int, int]:
    p = positions[node].start
    return (p.line, p.column)


class After:
    """The nodes of ``func`` that may run after ``site``: later in the text, anywhere in a loop
    around the site (its next iteration), or in the body of a nested function (``def``, or a
    lambda bound to a name) defined before the site and named after it: a closure reads its free
    names when it is called. The site's own subtree is not included."""

    def __init__(self, func: cst.FunctionDef, site: cst.CSTNode, positions):
        self.func, self.site, self.positions = func, site, positions
        end = positions[site].end
        self.site_end = (end.line, end.column)
        self._nodes: Optional[list[cst.CSTNode]] = None
        self.closure: dict[int, str] = {}  # id of a node in a nested function's body -> that function's name
        self.loop: Optional[tuple[tuple[int, int], tuple[int, int]]] = None
        for node in E.iter_tree(func.body):
            if isinstance(node, (cst.For, cst.While)) and any(d is site for d in E.iter_tree(node)):
                p = positions[node]
                self.loop = ((p.start.line, p.start.column), (p.end.line, p.end.column))

    def runs_after(self, node: cst.CSTNode) -> bool:
        start = _position(self.positions, node)
        return start >= self.site_end or (self.loop is not None and self.loop[0] <= start <= self.loop[1])

    def nodes(self) -> list[cst.CSTNode]:
        if self._nodes is None:
            nodes = [n for n in E._skip_walk(self.func.body, self.site) if self.runs_after(n)]
            named = {n.value for n in nodes if isinstance(n, cst.Name)}
            for name, body in _nested_functions(self.func):
                if name in named and not self.runs_after(body):
                    inner = list(E.iter_tree(body))
                    nodes.extend(inner)
                    self.closure.update((id(n), name) for n in inner)
            self._nodes = nodes
        return self._nodes


def _nested_functions(func: cst.FunctionDef) -> Iterable[tuple[str, cst.CSTNode]]:
    """Each function defined inside ``func`` with its name: ``def f(...)`` and ``f = lambda ...``."""
    for node in E.iter_tree(func.body):
        if isinstance(node, cst.FunctionDef):
            yield node.name.value, node.body
        elif isinstance(node, cst.Assign) and isinstance(node.value, cst.Lambda):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    yield target.target.value, node.value.body


def rebound(func: cst.FunctionDef, site: cst.CSTNode, positions, bound: Iterable[str]) -> frozenset[str]:
    """Of the names the site binds on every path (``bound``), those that hold the site's new
    tensor wherever they are read after it: no other statement that may run after the site
    (later, or in a loop around it) binds them again."""
    after = After(func, site, positions)
    again: set[str] = set()
    for node in after.nodes():
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.AsName,
                             cst.NamedExpr)):
            again |= {n.value for n in E._targets_of(node) if isinstance(n, cst.Name)}
    return frozenset(set(bound) - again)


def saved_written(func: cst.FunctionDef, site: cst.CSTNode, positions, names: set[str], site_bound: frozenset[str],
                  t, known_fresh: frozenset[str], modules: E.Modules) -> Optional[str]:
    """Why a tensor the condition or an arm reads (``names``), which autograd may save for the
    backward pass, may be updated in place after the site, or None."""
    hazard = later_write(func, site, positions, set(names), t, known_fresh, modules, rebound=site_bound)
    if hazard is None:
        return None
    return (f"{hazard}; both branches now run and autograd saves what they read (`h * h` and `h.clamp(...)` save "
            "`h`, torch.where saves its condition, and a compiled backward may compute the condition again from "
            "what it read), so that update would make backward raise or use the updated values")


def later_write(func: cst.FunctionDef, site: cst.CSTNode, positions, names: set[str], t,
                known_fresh: frozenset[str], modules: E.Modules, rebound: frozenset[str] = frozenset()) -> Optional[str]:
    """:func:`_effects.later_write`, and the updates it does not follow: through a view or a list
    (``h.detach().add_(1)``: ``detach`` shares the version counter; ``torch._foreach_add_([h], 1)``),
    a walrus (``(g := h).add_(1)``), a method fetched by name (``getattr(h, "add_")(1)``), a lambda
    handed the tensor (``map(lambda t: t.add_(1), [h])``), or the body of a nested function
    defined before the site and called after it (:class:`After`)."""
    why = E.later_write(func, site, positions, names, t, known_fresh, modules, rebound=rebound)
    if why or not names:
        return why
    classes = E.alias_classes(func, t, known_fresh, modules)
    shared = set(names).union(*(classes.get(n, set()) for n in names))
    after = After(func, site, positions)
    for node in after.nodes():
        reached, why = _reached(node, t, modules, known_fresh)
        hit = (reached & shared) - rebound
        if hit:
            inside = f" (in `{after.closure[id(node)]}`, called after the site)" if id(node) in after.closure else ""
            return (f"{why} at line {_line(after, node)}{inside}, and `{sorted(hit)[0]}` may share its tensor with "
                    f"`{sorted(names)[0]}`")
    return None


def _reached(node: cst.CSTNode, t, modules: E.Modules, known_fresh: frozenset[str]) -> tuple[set[str], str]:
    """The names whose tensors ``node`` may update in place (followed through views, lists and
    walruses, where :func:`_effects._node_writes` stops at a plain name), and why."""
    if not isinstance(node, cst.Call):
        return E._node_writes(node, t, modules, known_fresh)
    written, why = E.call_writes(node, t, modules, known_fresh | frozenset(E.ALIAS_METHODS))
    if not why:
        return set(), ""
    kind, name = t.func(node.func)
    receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
    firsts = [a.value for a in node.args if a.keyword is None and not a.star]
    if E._inplace_flag(node) or any(a.keyword is not None and a.keyword.value == "out" for a in node.args):
        return written, why
    if name.endswith("_") and not name.endswith("__"):
        # one tensor is updated: the receiver, or the first argument (`torch.Tensor.add_(h, 1)` too)
        if kind == "method" and receiver is not None and E.dotted(receiver).split(".")[-1] != "Tensor":
            return written | _alias_roots(receiver, t, known_fresh, modules), why
        return written | (_alias_roots(firsts[0], t, known_fresh, modules) if firsts else set()), why
    # a call not known to leave its arguments unchanged may update whatever it is handed
    handed = [a.value for a in node.args] + ([receiver] if receiver is not None else []) \
        + ([node.func] if isinstance(node.func, cst.Call) else [])
    return written.union(*(_alias_roots(v, t, known_fresh, modules) for v in handed)), why


def _alias_roots(expr: cst.CSTNode, t, known_fresh: frozenset[str], modules: E.Modules) -> set[str]:
    if isinstance(expr, cst.NamedExpr):
        return E.roots(expr.target) | _alias_roots(expr.value, t, known_fresh, modules)
    return E.alias_roots(expr, t, known_fresh, modules)


def _mentions(node: cst.CSTNode, names: set[str]) -> bool:
    return any(isinstance(n, cst.Name) and n.value in names for n in E.iter_tree(node))


def _bindings(node: cst.CSTNode, t) -> Optional[tuple[list[cst.CSTNode], set[str]]]:
    """What ``node`` binds names to after the site, as (the values it reads, the names it binds),
    or None: an assignment, a ``for`` or a comprehension's ``for`` (its target from its iterable),
    a walrus, a container method that keeps its argument (``outs.append(y)`` binds ``outs``), or
    a call that hands a lambda the other arguments (``map(lambda k: ..., [y])`` binds ``k``)."""
    if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and node.value is not None:
        return [node.value], {n.value for n in E._targets_of(node) if isinstance(n, cst.Name)}
    if isinstance(node, (cst.For, cst.CompFor)):
        return [node.iter], {n.value for n in E.iter_tree(node.target) if isinstance(n, cst.Name)}
    if isinstance(node, cst.NamedExpr):
        return [node.value], {n.value for n in E.iter_tree(node.target) if isinstance(n, cst.Name)}
    if isinstance(node, cst.Call):
        kind, name = t.func(node.func)
        if kind == "method" and name in E.KEEPING_METHODS and isinstance(node.func, cst.Attribute):
            return [a.value for a in node.args], E.roots(node.func.value)
        lambdas = [a.value for a in node.args if isinstance(a.value, cst.Lambda)]
        if lambdas:
            params = {p.name.value for lam in lambdas for p in lam.params.params}  # type: ignore[attr-defined]
            return [a.value for a in node.args if not isinstance(a.value, cst.Lambda)], params
    return None


def derived(after: After, names: set[str], t) -> set[str]:
    """``names`` and every name bound, after the site, to a value computed from one of them
    (which inherits its layout: ``z = out * 2``, ``w = out.transpose(0, 1)``) or to a container
    that holds one (``outs.append(out)``, ``[k for k in (out, v)]``): see :func:`_bindings`."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for node in after.nodes():
            bound = _bindings(node, t)
            if bound is None or not any(_mentions(v, out) for v in bound[0]):
                continue
            if not bound[1] <= out:
                out |= bound[1]
                changed = True
    return out


def evident_layouts(values: list[cst.CSTNode], t) -> bool:
    """Whether the arms' values evidently share one layout: each applies the same layout-making
    ops (none, or the same ones). ``x.clamp(...)`` and ``x`` do, ``y + x`` and ``y`` too;
    ``x * 2`` and ``x.contiguous() + 1`` do not. A heuristic, not a proof: arms over different
    tensors (``self.long * 2``, ``self.short * 3``) follow their own operands' strides, and an
    operand that is not dense (a slice) keeps its strides only in the identity arm; the direct
    layout reads :func:`layout_use` looks for are declined whatever this says."""
    signatures = set()
    for v in values:
        ops: list[str] = []
        for n in E.iter_tree(v):
            if isinstance(n, cst.Call):
                kind, name = t.func(n.func)
                if name in LAYOUT_OPS and kind in ("torch", "F", "method"):
                    ops.append(name)
                if any(a.keyword is not None and a.keyword.value == "memory_format" for a in n.args):
                    ops.append("memory_format")
            elif isinstance(n, cst.Attribute) and n.attr.value in LAYOUT_ATTRS:
                ops.append(n.attr.value)
            elif isinstance(n, cst.Subscript):
                ops.append("[]")
        signatures.add(tuple(sorted(ops)))
    return len(signatures) <= 1


def _known_call(call: cst.Call, t, modules: E.Modules) -> bool:
    """A call known neither to print its arguments nor to read their layout."""
    kind, name = t.func(call.func)
    if kind in ("torch", "F"):
        return name not in STRIDE_FUNCS
    own = E._is_self_module(call)
    if own is not None:
        return own in modules.vetted or own in modules.writers
    if kind == "method":
        return name in E.CONTAINER_METHODS or name in E.ALIAS_METHODS or name in A.FRESH
    return name in E.NON_WRITING_BUILTINS and name not in PRINTING_BUILTINS


def _line(after: After, node: cst.CSTNode) -> int:
    return after.positions[node].start.line


def layout_use(func: cst.FunctionDef, site: cst.CSTNode, positions, selected: set[str], t, modules: E.Modules,
               *, same_layout: bool, known_fresh: frozenset[str]) -> Optional[str]:
    """Why the layout of a selected value (or of a value computed from it) may be seen after the
    site, or None. ``same_layout``: the arms evidently share a layout (:func:`evident_layouts`),
    so only a direct layout read is a hazard; otherwise an unknown call that receives one, or
    one leaving the function, is one too."""
    after = After(func, site, positions)
    tainted = derived(after, selected, t)
    # a direct read first: it names the use that differs, whatever the arms
    why = _layout_read(after.nodes(), tainted, t, modules, same_layout=True, after=after) \
        or _layout_read(after.nodes(), tainted, t, modules, same_layout=same_layout, after=after)
    if why:
        return why
    # `reshape`/`flatten`/`contiguous` make a view where the strides allow and a copy where not: an
    # in-place update of the select, or of that result, reaches the other on one path only
    for node in after.nodes():
        if isinstance(node, cst.Call) and _copy_or_view(node, tainted, t):
            write = later_write(func, site, positions, set(selected), t, known_fresh, modules)
            if write:
                return (f"`{E.code(node)}` at line {_line(after, node)} shares a selected value's memory where its "
                        f"strides allow and is a copy where not, and {write}; torch.where's result does not keep the "
                        "strides of the branch taken")
            break
    return None


# Ops that return a view of their operand when its strides allow, and a copy otherwise.
COPY_OR_VIEW = frozenset("reshape reshape_as flatten ravel contiguous".split())


def _copy_or_view(call: cst.Call, tainted: set[str], t) -> bool:
    kind, name = t.func(call.func)
    if kind == "method" and (name in COPY_OR_VIEW or name == "to" and any(
            a.keyword is not None and a.keyword.value == "memory_format" for a in call.args)):
        return _mentions(call.func.value, tainted)  # type: ignore[attr-defined]
    return kind == "torch" and name in COPY_OR_VIEW and bool(call.args) and _mentions(call.args[0].value, tainted)


def _layout_read(nodes: Iterable[cst.CSTNode], tainted: set[str], t, modules: E.Modules, *, same_layout: bool,
                 after: Optional[After]) -> Optional[str]:
    for node in nodes:
        where = f" at line {_line(after, node)}" if after is not None else ""
        if isinstance(node, cst.Call):
            kind, name = t.func(node.func)
            args = [a.value for a in node.args]
            if _stride_read(node, kind, name, args, tainted):
                return (f"`{E.code(node)}`{where} depends on the strides of a selected value; torch.where's result "
                        "does not keep the strides of the branch taken")
            if kind == "torch" and name in STRIDE_FUNCS and any(_mentions(a, tainted) for a in args):
                return (f"`{E.code(node)}`{where} depends on the strides of a selected value; torch.where's result "
                        "does not keep the strides of the branch taken")
            if not same_layout and any(_mentions(a, tainted) for a in args) and not _known_call(node, t, modules):
                return (f"`{E.code(node.func)}(...)`{where} is not known and receives a selected value (it may read "
                        "its strides), and the branches evidently differ in layout; torch.where's result does not "
                        "keep the strides of the branch taken")
        if not same_layout and isinstance(node, (cst.Return, cst.Yield)) and node.value is not None \
                and _mentions(node.value, tainted):
            return (f"a selected value leaves the function{where} (the caller may read its strides), and the branches "
                    "evidently differ in layout; torch.where's result does not keep the strides of the branch taken")
        if not same_layout and isinstance(node, cst.Assign) and _mentions(node.value, tainted) \
                and any(not isinstance(a.target, cst.Name) for a in node.targets):
            return (f"a selected value is stored{where} (its reader may read its strides), and the branches "
                    "evidently differ in layout; torch.where's result does not keep the strides of the branch taken")
        if not same_layout and isinstance(node, cst.Call) and t.func(node.func)[1] in E.KEEPING_METHODS \
                and any(_mentions(a.value, tainted) for a in node.args):
            return (f"`{E.code(node.func)}(...)`{where} keeps a selected value (its reader may read its strides), "
                    "and the branches evidently differ in layout; torch.where's result does not keep the strides "
                    "of the branch taken")
    return None


def _stride_read(call: cst.Call, kind: str, name: str, args: list, tainted: set[str]) -> bool:
    """``call`` reads the strides of a tainted value: ``out.view(-1)``, ``torch.Tensor.view(out, -1)``,
    ``getattr(out, "view")`` (or any attribute whose name is not a literal)."""
    if kind == "method" and name in STRIDE_METHODS:
        receiver = call.func.value  # type: ignore[attr-defined]
        if E.dotted(receiver).split(".")[-1] == "Tensor":  # the unbound method: the tensor is its first argument
            return bool(args) and _mentions(args[0], tainted)
        return _mentions(receiver, tainted)
    if kind == "other" and name == "getattr" and len(args) >= 2 and _mentions(args[0], tainted):
        attr = args[1]
        return not isinstance(attr, cst.SimpleString) or attr.evaluated_value in STRIDE_METHODS
    return False


def call_layout_use(call: cst.Call, t, modules: E.Modules, *, same_layout: bool) -> Optional[str]:
    """Why the call that now receives a select (GM101's call form) may see its layout, or None."""
    kind, name = t.func(call.func)
    if kind == "torch" and name in STRIDE_FUNCS:
        return f"`{E.code(call.func)}(...)` depends on the strides of the select"
    if not same_layout and not _known_call(call, t, modules):
        return (f"`{E.code(call.func)}(...)` is not known and receives the select (it may read its strides), and the "
                "branches evidently differ in layout; torch.where's result does not keep the strides of the branch "
                "taken")
    return None


class _Holders:
    """The names that may hold a selected value after the site, and what carries its text.

    ``tensors``: the selected value itself (``residual = y``, ``for t in (y,)``, ``z := y``);
    ``containers``: something holding it (``outs = [y]``, ``outs.append(y)``, ``cache["k"] = y``),
    so that an item of one may be it too. A value *carries* the select's text when printing it
    shows the select's: the select or a container of it, its ``grad_fn``, text made from it
    (``str(y)``, ``"{}".format(y)``), and what an unknown function makes of it (``dict(h=y)``,
    ``ValueError(y)``). A value computed from it (``y.sum()``, ``y.detach()``, ``y[0]``, ``y * 2``)
    has its own ``grad_fn`` (or none) either way and does not carry it."""

    def __init__(self, after: After, bare: set[str], t, contained: frozenset[str] = frozenset()):
        self.t = t
        self.tensors, self.containers = set(bare), set(contained)
        self.strings = _string_names(after.func)
        changed = bool(bare or contained)
        while changed:
            changed = False
            for node in after.nodes():
                bound = _bindings(node, t)
                if bound is None:
                    continue
                values, names = bound
                if not names or not any(self.carries(v) for v in values):
                    continue
                # an item (`for t in outs`, a lambda's parameter) or the value itself (`residual = y`)
                # may be the select; what else binds a name to it makes a container of it
                kept = isinstance(node, cst.Call) and self.t.func(node.func)[1] in E.KEEPING_METHODS
                itself = isinstance(node, (cst.For, cst.CompFor)) or (isinstance(node, cst.Call) and not kept) or any(
                    isinstance(v, (cst.Name, cst.NamedExpr, cst.IfExp, cst.BooleanOperation)) and self.carries(v)
                    for v in values)
                before = len(self.tensors) + len(self.containers)
                self.containers |= names
                if itself:
                    self.tensors |= names
                changed = changed or len(self.tensors) + len(self.containers) != before

    def carries(self, e: cst.CSTNode) -> bool:
        held = self.tensors | self.containers
        if isinstance(e, cst.Name):
            return e.value in held
        if isinstance(e, (cst.Tuple, cst.List, cst.Set)):
            return any(self.carries(x.value) for x in e.elements)
        if isinstance(e, cst.Dict):
            return any(self.carries(x.value) for x in e.elements)
        if isinstance(e, cst.Subscript):  # an item of a container (an index of the tensor is a new one)
            return e.value.value in self.containers if isinstance(e.value, cst.Name) else self.carries(e.value)
        if isinstance(e, cst.Attribute):
            return e.attr.value == "grad_fn" and self.carries(e.value)
        if isinstance(e, cst.IfExp):
            return self.carries(e.body) or self.carries(e.orelse)
        if isinstance(e, cst.BooleanOperation):
            return self.carries(e.left) or self.carries(e.right)
        if isinstance(e, cst.NamedExpr):
            return self.carries(e.value)
        if isinstance(e, cst.FormattedString):
            return any(isinstance(p, cst.FormattedStringExpression) and self.carries(p.expression) for p in e.parts)
        if isinstance(e, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            return _mentions(e, held)
        if isinstance(e, cst.BinaryOperation):  # text: `"h=" + str(y)`, `fmt % y`
            return (self.text(e.left) or self.text(e.right)) and (self.carries(e.left) or self.carries(e.right))
        if isinstance(e, cst.Call):
            kind, name = self.t.func(e.func)
            if kind in ("torch", "F"):
                return False  # a new tensor, with its own grad_fn
            args = any(self.carries(a.value) for a in e.args)
            if kind == "method":
                if name in A.FRESH or name == "detach":
                    return False
                receiver = e.func.value  # type: ignore[attr-defined]
                # a no-op conversion (`y.float()`, `y.contiguous()`) or a container's item is the value itself
                return args or (self.carries(receiver) and (name not in LAYOUT_OPS or name == "contiguous"))
            return args and name not in ("len", "isinstance", "hasattr", "id", "type", "int", "float", "bool")
        return False

    def text(self, e: cst.CSTNode) -> bool:
        """``e`` is evidently text (a string literal, a name only ever bound to one, ``str(...)``)."""
        if isinstance(e, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            return True
        if isinstance(e, cst.Name):
            return e.value in self.strings
        if isinstance(e, cst.Call):
            kind, name = self.t.func(e.func)
            return (kind == "other" and name in PRINTING_BUILTINS) or (kind == "method" and name == "format")
        return False


def _string_names(func: cst.FunctionDef) -> set[str]:
    """The names ``func`` binds only to string literals (``fmt = "h=%s"``)."""
    strings, others = set(), set()
    for node in E.iter_tree(func.body):
        if isinstance(node, cst.Assign) and isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString,
                                                                     cst.FormattedString)):
            strings |= {tg.target.value for tg in node.targets if isinstance(tg.target, cst.Name)}
        elif isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr,
                               cst.AsName)):
            others |= {n.value for n in E._targets_of(node) if isinstance(n, cst.Name)}
    return strings - others


def printing_call(call: cst.Call, t, modules: E.Modules) -> bool:
    """A call that prints or formats its arguments: the printing builtins and methods. A call the
    analysis cannot read is not counted (as a returned value is not: its text is the caller's
    business); counting it declined every select handed to a helper of another file."""
    kind, name = t.func(call.func)
    if kind == "other" and name in PRINTING_BUILTINS:
        return True
    return kind == "method" and name in PRINTING_METHODS


def printed(func: cst.FunctionDef, site: cst.CSTNode, positions, selected: set[str], t,
            modules: E.Modules, contained: frozenset[str] = frozenset()) -> Optional[str]:
    """Why a selected value itself (its ``grad_fn`` shows in its text) may be printed, formatted,
    raised or asserted with after the site, directly or through a name or container that holds
    it (:class:`_Holders`; ``contained``: names that hold a container of it already), or None.
    Values computed from it have their own ``grad_fn`` either way."""
    after = After(func, site, positions)
    held = _Holders(after, selected, t, contained)
    grad_fn = "its text names its grad_fn (`WhereBackward0` after the rewrite)"
    for node in after.nodes():
        where = f"at line {_line(after, node)}"
        # text made inside the call (an f-string, `str(y)`) is named where it is made, further on
        if isinstance(node, cst.Call) and any(held.carries(a.value) and not held.text(a.value) for a in node.args) \
                and printing_call(node, t, modules):
            return (f"`{E.code(node.func)}(...)` {where} may print or format a selected value; it requires grad, and "
                    f"{grad_fn}")
        if isinstance(node, cst.FormattedStringExpression) and held.carries(node.expression):
            return f"the f-string {where} formats a selected value; it requires grad, and {grad_fn}"
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
                and held.text(node.left) and held.carries(node.right):
            return f"`%` {where} formats a selected value; {grad_fn}"
        if isinstance(node, cst.Attribute) and node.attr.value == "grad_fn" and held.carries(node.value):
            return f"`{E.code(node)}` {where} is `WhereBackward0` after the rewrite, not the branch's own"
        if isinstance(node, cst.Call) and t.func(node.func) == ("other", "getattr") and len(node.args) >= 2 \
                and held.carries(node.args[0].value) and not (isinstance(node.args[1].value, cst.SimpleString)
                                                              and node.args[1].value.evaluated_value != "grad_fn"):
            return f"`{E.code(node)}` {where} may read the select's grad_fn (`WhereBackward0` after the rewrite)"
        if isinstance(node, cst.Assert) and node.msg is not None and held.carries(node.msg):
            return f"the assertion's message {where} is a selected value; it requires grad, and {grad_fn}"
        if isinstance(node, cst.Raise) and node.exc is not None and held.carries(node.exc):
            return f"the exception raised {where} holds a selected value; it requires grad, and {grad_fn}"
    return None


def later_use(func: cst.FunctionDef, site: cst.CSTNode, positions, t, modules: E.Modules, *, grad: bool,
              reads: set[str], bound: set[str], selected: dict[str, list],
              known_fresh: frozenset[str], call: Optional[cst.Call] = None, call_values: Optional[list] = None,
              returned: Optional[list] = None, bare: Optional[set[str]] = None,
              contained: frozenset[str] = frozenset()) -> Optional[str]:
    """Why the code after a predicated site could tell the select from the ``if``, or None.

    ``grad``: gradients may flow (autograd is not provably off around the site). ``reads``: the
    names the condition and the arms read; ``bound``: the names the rewrite binds on every path;
    ``selected``: each selected name with its value in every arm; ``call``: the call that receives
    the select (with ``call_values``, the arms' arguments); ``returned``: the arms' returned values;
    ``bare``: the selected names that hold the select itself (default: all of them);
    ``contained``: those that hold a container of it (:func:`expression_holders`)."""
    if grad:
        why = saved_written(func, site, positions, reads, rebound(func, site, positions, bound), t, known_fresh,
                            modules)
        if why:
            return why
    for name in sorted(selected):
        same = evident_layouts(selected[name], t)
        why = layout_use(func, site, positions, {name}, t, modules, same_layout=same, known_fresh=known_fresh)
        if why:
            return why
    if call is not None:
        why = call_layout_use(call, t, modules, same_layout=evident_layouts(call_values or [], t))
        if why:
            return f"{why}; torch.where's result does not keep the strides of the branch taken"
        if grad and printing_call(call, t, modules):
            return (f"`{E.code(call.func)}(...)` may print or format the select; it requires grad, and its text names "
                    "its grad_fn (`WhereBackward0` after the rewrite)")
    if returned is not None and not evident_layouts(returned, t):
        return ("the selected value is returned (the caller may read its strides), and the branches evidently differ "
                "in layout; torch.where's result does not keep the strides of the branch taken")
    if grad:
        return printed(func, site, positions, set(selected) if bare is None else bare, t, modules, contained)
    return None


def expression_use(expr: cst.CSTNode, parents, t, modules: E.Modules, *, grad: bool, values: list) -> Optional[str]:
    """Why the statement around a select (GM402's expression form) may see its layout or print it,
    or None: ``(a if c else b).view(-1)``, ``helper(a if c else b)``, ``print(a if c else b)``,
    ``return a if c else b`` with arms that evidently differ in layout."""
    same = evident_layouts(values, t)
    reason = "; torch.where's result does not keep the strides of the branch taken"
    child, cur = expr, parents(expr)
    how = "itself"  # how `child` holds the select (:func:`_step`)
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        if isinstance(cur, cst.Attribute) and cur.value is child and cur.attr.value in STRIDE_METHODS:
            return f"`{E.code(cur)}(...)` depends on the strides of the select{reason}"
        if isinstance(cur, cst.Call) and child is not cur.func:
            why = call_layout_use(cur, t, modules, same_layout=same)
            if why:
                return why + reason
            if grad and isinstance(child, cst.Arg) and how != "computed" and printing_call(cur, t, modules):
                return (f"`{E.code(cur.func)}(...)` may print or format the select; it requires grad, and its text "
                        "names its grad_fn (`WhereBackward0` after the rewrite)")
        if grad and isinstance(cur, cst.FormattedStringExpression) and how != "computed":
            return "an f-string formats the select; its text names its grad_fn (`WhereBackward0` after the rewrite)"
        how = _step(how, cur, child, parents, t)
        child, cur = cur, parents(cur)
    if grad and how != "computed" and ((isinstance(cur, cst.Assert) and child is cur.msg)
                                       or (isinstance(cur, cst.Raise) and child is cur.exc)):
        return "the select is raised or asserted with; its text names its grad_fn (`WhereBackward0` after the rewrite)"
    if isinstance(cur, cst.Return) and not same:
        return ("the select is returned (the caller may read its strides), and the branches evidently differ in "
                f"layout{reason}")
    return None


def expression_holders(expr: cst.CSTNode, parents, t) -> tuple[set[str], set[str], set[str]]:
    """The names the statement around a select (GM402) binds to it, as (the select itself, a
    container holding it, a value computed from it): ``y = a if c else b``, ``k, v = (a if c
    else b), w``, ``cache["k"] = ...``, ``outs.append(...)``, ``(y := ...)``, ``for t in (..., w)``,
    ``z = (a if c else b) * 2``. A call the analysis cannot read may return its argument: what it
    makes is taken as a container of the select."""
    itself: set[str] = set()
    contained: set[str] = set()
    computed: set[str] = set()
    how = "itself"

    def add(names: set[str], unpacked: bool = False) -> None:
        if how == "computed":
            computed.update(names)
        elif unpacked:  # `k, v = (select, w)`: either may be the select itself
            itself.update(names)
            contained.update(names)
        else:
            (itself if how == "itself" else contained).update(names)

    child, cur = expr, parents(expr)
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        if isinstance(cur, cst.NamedExpr) and cur.value is child:
            add(E.roots(cur.target))
        if isinstance(cur, cst.Call) and child is not cur.func and t.func(cur.func)[0] == "method" \
                and t.func(cur.func)[1] in E.KEEPING_METHODS and how != "computed":
            contained.update(E.roots(cur.func.value))  # type: ignore[attr-defined]
        how = _step(how, cur, child, parents, t)
        child, cur = cur, parents(cur)
    if isinstance(cur, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and cur.value is child:
        targets = [a.target for a in cur.targets] if isinstance(cur, cst.Assign) else [cur.target]
        for target in targets:
            if isinstance(target, cst.Name):
                add({target.value})
            elif isinstance(target, (cst.Tuple, cst.List)):
                add({n.value for n in E.iter_tree(target) if isinstance(n, cst.Name)}, unpacked=True)
            elif how != "computed":
                contained.update(E.roots(target))  # `cache["k"] = ...`, `self.k = ...`
            else:
                computed.update(E.roots(target))
    elif isinstance(cur, cst.For) and cur.iter is child:
        add({n.value for n in E.iter_tree(cur.target) if isinstance(n, cst.Name)}, unpacked=True)
    return itself, contained, computed


def _step(how: str, cur: cst.CSTNode, child: cst.CSTNode, parents, t) -> str:
    """How the value of ``cur`` holds the select, given how its part ``child`` does: ``itself``,
    ``contained`` (a display, text made from it, what a call the analysis cannot read returns)
    or ``computed`` (an operator, an index, a torch function, a vetted method: its own tensor)."""
    if how == "computed":
        return how
    if isinstance(cur, (cst.Tuple, cst.List, cst.Set, cst.Dict, cst.FormattedString)):
        return "contained"
    if isinstance(cur, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.Subscript)) \
            or (isinstance(cur, cst.Attribute) and cur.value is child and not isinstance(parents(cur), cst.Call)):
        return "computed"
    if isinstance(cur, cst.Call) and child is not cur.func:
        kind, name = t.func(cur.func)
        if (kind == "method" and name in E.KEEPING_METHODS) or kind in ("torch", "F") or name in A.FRESH:
            return "computed"  # what `append` returns, or a new tensor
        return "contained"
    if isinstance(cur, cst.Call) and isinstance(child, cst.Attribute):  # a method of the select
        _, name = t.func(cur.func)
        if name in A.FRESH or name == "detach" or (name in LAYOUT_OPS and name != "contiguous"):
            return "computed"
    return how


# --- identity: the selected value is a new tensor (GM101, GM402) ---------------------------------


def outside_roots(source: SourceFile, func: cst.FunctionDef, node: cst.CSTNode, values: list, t: A._Torch) -> set[str]:
    """The names whose objects (an argument, ``self``'s attribute, not a tensor made in this
    function before ``node``) the values may be, view, or be a no-op conversion of."""
    modules = E.Modules(source.enclosing(func, (cst.ClassDef,)))  # type: ignore[arg-type]
    out: set[str] = set()
    for v in values:
        for root in E.alias_roots(v, t, A.FRESH, modules):
            if not E.reaching_fresh(func, node, root, source.parent, t, A.FRESH, modules):
                out.add(root)
    return out


def identity_reason(value: str, root: str) -> str:
    return (f"on one path the value is `{value}`, which may be `{root}`'s own object (the caller's tensor, a "
            "parameter or buffer, or a view or no-op conversion of it); torch.where returns a new tensor, so the "
            "caller would no longer get that object (its identity, later in-place updates, an nn.Parameter's type)")


def alias_hazard(source: SourceFile, func: cst.FunctionDef, site: cst.CSTNode, names: set[str], t: A._Torch) -> Optional[str]:
    """Why replacing ``names``' values by a select may lose an in-place update, or change what an
    identity test (``y is x``, ``id(y)``) finds, or None."""
    cls = source.enclosing(func, (cst.ClassDef,))
    modules = E.Modules(cls)  # type: ignore[arg-type]
    why = later_write(func, site, source.positions, names, t, A.FRESH, modules)
    return why or identity_read(func, site, source.positions, names, t, modules)


def identity_read(func: cst.FunctionDef, site: cst.CSTNode, positions, names: set[str], t,
                  modules: E.Modules) -> Optional[str]:
    """Why the code after the site may test the identity of a tensor ``names`` may share (``is``
    between two tensors, ``id(...)``, ``hash(...)``, a dict key or set member), or None: the select
    is a new object where the branch kept an existing one. A test against ``None``/``True``/
    ``False`` is not one."""
    classes = E.alias_classes(func, t, A.FRESH, modules)
    shared = set(names).union(*(classes.get(n, set()) for n in names))
    after = After(func, site, positions)
    for node in after.nodes():
        if isinstance(node, cst.Comparison):
            left = node.left
            for c in node.comparisons:
                if isinstance(c.operator, (cst.Is, cst.IsNot)) and not (_constant(left) or _constant(c.comparator)) \
                        and (_mentions(left, shared) or _mentions(c.comparator, shared)):
                    return (f"`{E.code(node)}` at line {_line(after, node)} tests the identity of a tensor a branch "
                            "keeps; torch.where returns a new tensor")
                left = c.comparator
        if isinstance(node, cst.Call) and t.func(node.func) in (("other", "id"), ("other", "hash")) \
                and any(_mentions(a.value, shared) for a in node.args):
            return (f"`{E.code(node)}` at line {_line(after, node)} reads the identity of a tensor a branch keeps; "
                    "torch.where returns a new tensor")
        # a tensor hashes by identity: a dict key or a set member is found by the object
        keys = [e.key for e in node.elements if isinstance(e, cst.DictElement)] if isinstance(node, cst.Dict) else \
            [e.value for e in node.elements] if isinstance(node, cst.Set) else []
        if any(isinstance(k, cst.Name) and k.value in shared for k in keys):
            return (f"`{E.code(node)}` at line {_line(after, node)} keys a tensor a branch keeps by its identity; "
                    "torch.where returns a new tensor")
    return None


def _constant(e: cst.CSTNode) -> bool:
    return isinstance(e, cst.Name) and e.value in ("None", "True", "False")
