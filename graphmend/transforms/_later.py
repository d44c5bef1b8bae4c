"""Later uses: what the code after a predicated site does with the values the site made or read.

``torch.where(c, a, b)`` (GM101, GM402) computes the same values as the ``if`` it replaces, but it
is not the same object graph, and the code after the site can tell:

- **layout** (:func:`layout_use`): the select's strides come from TensorIterator (the condition,
  then the first arm decide the order of dimensions), not from the branch taken. ``a`` may be a
  transposed view and ``b`` contiguous: ``out.view(-1)`` then raises (or stops raising),
  ``out.stride()``, ``out.is_contiguous()``, ``out.data_ptr()`` read something else (a
  ``reshape``/``flatten``/``contiguous`` that copies where it made a view is an alias question:
  ``_effects.later_write`` already puts its result with the selected name). Anything computed from the selected value inherits its
  layout (elementwise ops keep their operand's strides), so the analysis follows the values
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
  can flow. A name the site itself binds (``h = h.clamp(...)``, then ``h.add_(1)``) names the new
  tensor after the site, so a write through it is not one; the tensor it held before may still
  be written through another name (``g = h`` before the site, ``g.add_(1)`` after), which counts.
- **printing** (:func:`printed`): a tensor that requires grad prints its ``grad_fn``
  (``grad_fn=<WhereBackward0>`` after the rewrite, the branch's own before). A selected value
  printed, formatted, logged or read for its ``grad_fn`` after the site is declined unless
  autograd is provably off around the site (a call the analysis cannot read is not counted, as a
  returned value is not).

- **identity** (:func:`alias_hazard`, :func:`outside_roots`): the select is a new tensor where
  the original kept an existing one (the caller's argument, a buffer, another alias), so a later
  in-place update through another name, or the caller, would no longer reach it.

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
debug info warning warn error critical exception log warning_once info_once write writelines
""".split())


def _position(positions, node: cst.CSTNode) -> tuple[int, int]:
    p = positions[node].start
    return (p.line, p.column)


class After:
    """The nodes of ``func`` that may run after ``site``: later in the text, or anywhere in a
    loop around the site (its next iteration). The site's own subtree is not included."""

    def __init__(self, func: cst.FunctionDef, site: cst.CSTNode, positions):
        self.func, self.site, self.positions = func, site, positions
        end = positions[site].end
        self.site_end = (end.line, end.column)
        self._nodes: Optional[list[cst.CSTNode]] = None
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
            self._nodes = [n for n in E._skip_walk(self.func.body, self.site) if self.runs_after(n)]
        return self._nodes


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
    hazard = E.later_write(func, site, positions, set(names), t, known_fresh, modules, rebound=site_bound)
    if hazard is None:
        return None
    return (f"{hazard}; both branches now run and autograd saves what they read (`h * h` and `h.clamp(...)` save "
            "`h`, torch.where saves its condition, and a compiled backward may compute the condition again from "
            "what it read), so that update would make backward raise or use the updated values")


def _mentions(node: cst.CSTNode, names: set[str]) -> bool:
    return any(isinstance(n, cst.Name) and n.value in names for n in E.iter_tree(node))


def derived(after: After, names: set[str]) -> set[str]:
    """``names`` and every name assigned, after the site, a value computed from one of them
    (which inherits its layout: ``z = out * 2``, ``w = out.transpose(0, 1)``)."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for node in after.nodes():
            value = None
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                value = node.value
            elif isinstance(node, cst.For):
                value = node.iter
            if value is None or not _mentions(value, out):
                continue
            targets = {n.value for n in E._targets_of(node) if isinstance(n, cst.Name)}
            if isinstance(node, cst.For):
                targets = {n.value for n in E.iter_tree(node.target) if isinstance(n, cst.Name)}
            if not targets <= out:
                out |= targets
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
    tainted = derived(after, selected)
    # a direct read first: it names the use that differs, whatever the arms
    why = _layout_read(after.nodes(), tainted, t, modules, same_layout=True, after=after) \
        or _layout_read(after.nodes(), tainted, t, modules, same_layout=same_layout, after=after)
    if why:
        return why
    return None


def _layout_read(nodes: Iterable[cst.CSTNode], tainted: set[str], t, modules: E.Modules, *, same_layout: bool,
                 after: Optional[After]) -> Optional[str]:
    for node in nodes:
        where = f" at line {_line(after, node)}" if after is not None else ""
        if isinstance(node, cst.Call):
            kind, name = t.func(node.func)
            if kind == "method" and name in STRIDE_METHODS and _mentions(node.func.value, tainted):  # type: ignore[attr-defined]
                return (f"`{E.code(node)}`{where} depends on the strides of a selected value; torch.where's result "
                        "does not keep the strides of the branch taken")
            args = [a.value for a in node.args]
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


def _bare(value: cst.CSTNode, names: set[str]) -> bool:
    """``value`` is one of ``names`` itself, or a tuple/list/dict display holding one."""
    if isinstance(value, cst.Name):
        return value.value in names
    if isinstance(value, (cst.Tuple, cst.List, cst.Set)):
        return any(_bare(e.value, names) for e in value.elements if isinstance(e, (cst.Element, cst.StarredElement)))
    if isinstance(value, cst.Dict):
        return any(_bare(e.value, names) for e in value.elements if isinstance(e, cst.DictElement))
    return False


def printing_call(call: cst.Call, t, modules: E.Modules) -> bool:
    """A call that prints or formats its arguments: the printing builtins and methods. A call the
    analysis cannot read is not counted (as a returned value is not: its text is the caller's
    business); counting it declined every select handed to a helper of another file."""
    kind, name = t.func(call.func)
    if kind == "other" and name in PRINTING_BUILTINS:
        return True
    return kind == "method" and name in PRINTING_METHODS


def printed(func: cst.FunctionDef, site: cst.CSTNode, positions, selected: set[str], t,
            modules: E.Modules) -> Optional[str]:
    """Why a selected value itself (its ``grad_fn`` shows in its text) may be printed or formatted
    after the site, or None. Values computed from it have their own ``grad_fn`` either way."""
    after = After(func, site, positions)
    for node in after.nodes():
        where = f"at line {_line(after, node)}"
        if isinstance(node, cst.Call) and any(_bare(a.value, selected) for a in node.args) \
                and printing_call(node, t, modules):
            return (f"`{E.code(node.func)}(...)` {where} may print or format a selected value; it requires grad, and "
                    "its text names its grad_fn (`WhereBackward0` after the rewrite)")
        if isinstance(node, cst.FormattedStringExpression) and _bare(node.expression, selected):
            return (f"the f-string {where} formats a selected value; it requires grad, and its text names its "
                    "grad_fn (`WhereBackward0` after the rewrite)")
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
                and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString)) and _bare(node.right, selected):
            return f"`%` {where} formats a selected value; its text names its grad_fn (`WhereBackward0` after the rewrite)"
        if isinstance(node, cst.Attribute) and node.attr.value == "grad_fn" and _bare(node.value, selected):
            return f"`{E.code(node)}` {where} is `WhereBackward0` after the rewrite, not the branch's own"
    return None


def later_use(func: cst.FunctionDef, site: cst.CSTNode, positions, t, modules: E.Modules, *, grad: bool,
              reads: set[str], bound: set[str], selected: dict[str, list],
              known_fresh: frozenset[str], call: Optional[cst.Call] = None, call_values: Optional[list] = None,
              returned: Optional[list] = None, bare: Optional[set[str]] = None) -> Optional[str]:
    """Why the code after a predicated site could tell the select from the ``if``, or None.

    ``grad``: gradients may flow (autograd is not provably off around the site). ``reads``: the
    names the condition and the arms read; ``bound``: the names the rewrite binds on every path;
    ``selected``: each selected name with its value in every arm; ``call``: the call that receives
    the select (with ``call_values``, the arms' arguments); ``returned``: the arms' returned values;
    ``bare``: the selected names that hold the select itself (default: all of them)."""
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
        return printed(func, site, positions, set(selected) if bare is None else bare, t, modules)
    return None


def expression_use(expr: cst.CSTNode, parents, t, modules: E.Modules, *, grad: bool, values: list) -> Optional[str]:
    """Why the statement around a select (GM402's expression form) may see its layout or print it,
    or None: ``(a if c else b).view(-1)``, ``helper(a if c else b)``, ``print(a if c else b)``,
    ``return a if c else b`` with arms that evidently differ in layout."""
    same = evident_layouts(values, t)
    reason = "; torch.where's result does not keep the strides of the branch taken"
    child, cur = expr, parents(expr)
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        if isinstance(cur, cst.Attribute) and cur.value is child and cur.attr.value in STRIDE_METHODS:
            return f"`{E.code(cur)}(...)` depends on the strides of the select{reason}"
        if isinstance(cur, cst.Call) and child is not cur.func:
            why = call_layout_use(cur, t, modules, same_layout=same)
            if why:
                return why + reason
            if grad and isinstance(child, cst.Arg) and child.value is expr and printing_call(cur, t, modules):
                return (f"`{E.code(cur.func)}(...)` may print or format the select; it requires grad, and its text "
                        "names its grad_fn (`WhereBackward0` after the rewrite)")
        if grad and isinstance(cur, cst.FormattedStringExpression) and child is expr:
            return "an f-string formats the select; its text names its grad_fn (`WhereBackward0` after the rewrite)"
        child, cur = cur, parents(cur)
    if isinstance(cur, cst.Return) and not same:
        return ("the select is returned (the caller may read its strides), and the branches evidently differ in "
                f"layout{reason}")
    return None


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
    """Why replacing ``names``' values by a select may lose an in-place update, or None."""
    cls = source.enclosing(func, (cst.ClassDef,))
    return E.later_write(func, site, source.positions, names, t, A.FRESH, E.Modules(cls))  # type: ignore[arg-type]
