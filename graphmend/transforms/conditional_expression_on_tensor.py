"""GM402 conditional-expression-on-tensor: ``a if t > 0 else b`` on a tensor, selected with ``torch.where``.

A conditional expression whose test is a tensor is the same data-dependent jump as an ``if``
statement (GB0170, "Data-dependent branching"): Dynamo ends the graph at it. GM101 handles ``if``
statements; this rule handles the expression form with GM101's own legality analysis — the
predicate (``_analysis.tensor_predicate``: a tensor, never ``.item()``/``torch.equal``/a Python
bool, ``and``/``or`` turned into ``&``/``|`` with a 0-d check), the effects of evaluating the arm
not taken (``_analysis.effects``: no random draws, in-place updates, unknown calls, computed
indices, integer division), and the selected values (``DataDependentBranch._check_values``: not
``None`` or a Python number, same shape and dtype proven or checked at run time by GM101's
``_graphmend_select`` helper, NaN-prone arms lowering the safety). Nothing is duplicated here
except the expression-level plumbing.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Fix, Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms import _effects as E
from graphmend.transforms import _layout_guard as G
from graphmend.transforms import _later as L
from graphmend.transforms import _merged as M
from graphmend.transforms import _reads as R
from graphmend.transforms import data_dependent_branch as gm101
from graphmend.transforms.base import RuleContext, SourceFile, Transform


class _Declined(Exception):
    """Stops the analysis at the first failed condition; becomes a Decline."""


class ConditionalExpressionOnTensor(Transform):
    code = "GM402"
    name = "conditional-expression-on-tensor"
    summary = "`a if <tensor condition> else b` whose arms only compute values: select with torch.where"
    safety = Safety.SAFE
    categories = (Category.DATA_DEPENDENT_BRANCH,)
    gb_types = ("Data-dependent branching",)

    docs = {
        "What it does": (
            "Finds a conditional expression (`a if cond else b`) whose condition is a tensor and whose two "
            "values can both be computed without effects, and rewrites it to `torch.where(cond, a, b)` "
            "(or GM101's checked `_graphmend_select` where the two values' shapes and dtypes cannot be "
            "proven equal from the source)."
        ),
        "Why it breaks the graph": (
            "`a if t > 0 else b` asks for the truth value of a tensor, exactly like `if t > 0:`. Dynamo "
            "cannot trace a jump decided by run-time data (GB0170, *Data-dependent branching*): it ends the "
            "graph, evaluates the test eagerly, and starts another graph."
        ),
        "Example": (
            "```python\n"
            "h = self.proj(x)\n"
            "h = h.clamp(-1e4, 1e4) if torch.isinf(h).any() else h\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "h = self.proj(x)\n"
            "h = (\n"
            "    _graphmend_select(torch.isinf(h).any(), h.clamp(-1e4, 1e4), h)  # torch.where when shapes/dtypes agree\n"
            "    if _graphmend_strided(h)  # static under Dynamo; a sparse, quantized or meta h: the original\n"
            "    else h.clamp(-1e4, 1e4) if torch.isinf(h).any() else h\n"
            ")\n"
            "```"
        ),
        "Fix safety": (
            "The conditions are GM101's: the condition is a tensor (not `.item()`, `torch.equal`, a Python "
            "bool); a condition that is not evidently one element goes through `_graphmend_truth`, which raises "
            "the expression's own \"Boolean value of Tensor with more than one value is ambiguous\" error "
            "instead of letting `where` broadcast it; evaluating the value not taken cannot raise, write state or "
            "draw random numbers (an operation that raises or warns for some dtypes, such as `-mask` on a bool tensor, "
            "`x.clamp(0)` on a complex one or `z.float()` of a complex one, makes the fix unsafe unless the dtype is "
            "shown, by a dtype check, by an op of the condition that would have raised, or by the assignment that "
            "reaches the expression: `h = self.lin(x)` with a torch.nn Linear, Conv, Embedding or norm layer is never "
            "bool); neither value is `None` or a Python number (`torch.where` would make it a "
            "tensor). Where the two values' shape and dtype are not proven equal the rewrite calls GM101's "
            "`_graphmend_select`, which uses `torch.where` only when they agree (a static check under Dynamo) "
            "and otherwise chooses as the expression did. Declined where gradients may flow (no enclosing "
            "`torch.no_grad()`/`inference_mode()`) and the two values draw them from different tensors "
            "(`x * 2 if c else t * 3`, two parameters): `where`'s result requires grad when either value does, "
            "and the tensors of the value not taken get a zero gradient instead of None. Declined where a value "
            "may overflow or be NaN and gradients may flow (`log`, `sqrt`, division, `pow`, `exp`, a product "
            "with an operand that may overflow such as `(x * 1e30) * x`: the untaken value's gradient is "
            "multiplied by zero, and 0 * inf is NaN). Declined where a value may be the caller's own object "
            "(`self.weight`, an argument, `x.detach()`, a no-op `.float()`) and the result is returned or kept "
            "as it is: `where` returns a new tensor (no Parameter, no identity, no shared storage). "
            + gm101.SPARSE_SAFETY
        ),
        "References": (
            "GM101 data-dependent-branch; PyTorch docs: `torch.where`; Dynamo graph-break registry GB0170."
        ),
    }

    VALID = (
        # The values draw gradients from different tensors: `where` would give `y` a zero gradient.
        "import torch\n\ndef f(x, y):\n    return x * 2 if x.sum() > 0 else y - 1\n",
        # A Python bool test: not a graph break.
        "import torch\n\ndef f(x, training):\n    return x * 2 if training else x\n",
        # .item() in the test: torch.where cannot take a Python bool.
        "import torch\n\ndef f(x):\n    return x * 2 if x.sum().item() > 0 else x\n",
        # A random draw in the untaken value.
        "import torch\n\ndef f(x):\n    return torch.rand_like(x) if x.any() else x\n",
        # A Python number as a value.
        "import torch\n\ndef f(x):\n    return x if x.sum() > 0 else 0.0\n",
    )

    INVALID = (
        (
            "import torch\n\ndef f(x):\n    return (x * 2 if x.sum() > 0 else x - 1) + 1\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + gm101._helper_code("torch") + "\ndef f(x):\n"
            "    return (\n        _graphmend_select(x.sum() > 0, x * 2, x - 1)\n        if _graphmend_strided(x)\n"
            "        else x * 2 if x.sum() > 0 else x - 1\n    ) + 1\n",
        ),
        (
            "import torch\n\ndef f(x):\n    z = (x.clamp(max=1.0) if (x > 1).any() else x) + 1\n    return z\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + gm101._helper_code("torch") + "\ndef f(x):\n"
            "    z = (\n        _graphmend_select((x > 1).any(), x.clamp(max=1.0), x)\n        if _graphmend_strided(x)\n"
            "        else x.clamp(max=1.0) if (x > 1).any() else x\n    ) + 1\n    return z\n",
        ),
    )

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for node in A._iter(source.module):
            if isinstance(node, cst.IfExp) and source.enclosing(node, (cst.FunctionDef,)) is not None:
                parent = source.parent(node)
                if G.is_guard(node.test) or (isinstance(parent, cst.IfExp) and G.is_guard(parent.test)):
                    continue  # an earlier fix and the original it keeps for tensors that are not strided
                yield node

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        return range(source.line(node), source.end_line(node) + 1)

    def run(self, source: SourceFile, ctx: RuleContext, lines: Optional[Iterable[int]] = None) -> list:
        if lines is not None:
            return super().run(source, ctx, lines)
        # Static mode: only conditions that evidently involve a tensor (as GM101 does).
        t = A.torch_names_of(source.module)
        original = self.sites
        self.sites = lambda s: [n for n in original(s) if gm101._looks_tensorish(n.test, t)]  # type: ignore[method-assign]
        try:
            return super().run(source, ctx, None)
        finally:
            del self.sites

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.IfExp)
        try:
            return self._rewrite(node, source, ctx)
        except (_Declined, gm101._Declined) as exc:
            return self.decline(source, node, str(exc))

    def _rewrite(self, node: cst.IfExp, source: SourceFile, ctx: RuleContext) -> Fix:
        t = A.torch_names_of(source.module)
        torch_name = source.torch_name() or "torch"
        notes: list[str] = []
        safety = Safety.SAFE
        if any(A.is_static(c, t) for c in A.split_conjuncts(node.test)):
            raise _Declined(f"part of the condition `{A.code(node.test)}` is a Python value; write it as an `if` "
                            "statement (GM101 keeps a static part as a Python `if`)")
        try:
            pred = A.tensor_predicate(node.test, t, trusted=ctx.verified)
        except A.NotATensor as exc:
            raise _Declined(str(exc)) from None
        func = source.enclosing(node, (cst.FunctionDef,))
        reads = R.Reads(source, func, t.torch_names | t.f_names)  # type: ignore[arg-type]
        for k, leaf in enumerate(A.bool_leaves(node.test)):
            eff = A.effects(leaf, t, reads.why)
            if not eff.ok:
                raise _Declined(f"the condition {eff.problems[0]}")
            # `a or b` becomes `a | b`: every leaf after the first now always runs.
            fallible = A.shape_fallible(leaf, t, frozenset(), {}) if k else None
            if fallible:
                safety = Safety.UNSAFE
                notes.append(f"`{fallible}` in the condition now runs where `and`/`or` skipped it, and may raise for some shapes")
        if not pred.zero_d:
            notes.append(f"the condition is not evidently one element; `{A.TRUTH_HELPER}` raises what the expression "
                         "raised for several or no elements instead of letting `where` broadcast it")
            if isinstance(node.test, cst.BooleanOperation):
                safety = Safety.UNSAFE
                notes.append("a condition that is not evidently one element now runs where `and`/`or` skipped it, "
                             "and may raise the \"ambiguous\" error where the original did not")
        func = source.enclosing(node, (cst.FunctionDef,))
        chosen = E.alias_roots(node.body, t, A.FRESH) | E.alias_roots(node.orelse, t, A.FRESH)
        if chosen:
            modules = E.Modules(source.enclosing(func, (cst.ClassDef,)))  # type: ignore[arg-type]
            why = E.operand_written(node, source.parent, t, modules, A.FRESH | frozenset(A.ALIAS_METHODS))
            why = why or L.alias_hazard(source, func, node, chosen, t)  # type: ignore[arg-type]
            if why:
                raise _Declined(f"{why}; the select makes a new tensor, so that update would miss the tensor "
                                "the original program wrote")
        # GM101's checks on the selected values, with its state for a single expression.
        checker = gm101.DataDependentBranch()
        known = gm101.site_dtypes(source, func, node, t, reads)  # type: ignore[arg-type]
        checker.begin_site(source, func, node, known, untyped=not pred.typed,  # type: ignore[arg-type]
                           facts=A.dtype_facts(node.test, t, known))
        safety = _lowest(safety, checker._check_values([node.body, node.orelse], "the selected value", t, notes, safety))
        outside = L.outside_roots(source, func, node, [node.body, node.orelse], t)  # type: ignore[arg-type]
        if outside:
            escape = _value_escapes(node, source, func, t)  # type: ignore[arg-type]
            if escape:
                value = next(v for v in (node.body, node.orelse) if L.outside_roots(source, func, node, [v], t))  # type: ignore[arg-type]
                raise _Declined(f"{L.identity_reason(A.code(value), sorted(outside)[0])}: {escape}")
        select = checker._select_fn(torch_name)
        text = f"{select}({pred.text}, {A.code(node.body)}, {A.code(node.orelse)})"
        # The select only where every tensor the expression reads is an ordinary strided one; any
        # other (sparse, quantized, meta …) gets the original expression, kept after `else`.
        local = gm101._assigned_in(func) | gm101._param_names(func)  # type: ignore[arg-type]
        guard = G.operands([node], local, lambda n: gm101._bound_before(n, node, func, source),  # type: ignore[arg-type]
                           G.Scope(source.module, t))
        why = gm101.guard_reads(reads, guard)
        if why:
            raise _Declined(why)
        why = _later_use(node, source, func, t)  # type: ignore[arg-type]
        if why:
            raise _Declined(why)
        why = M.lost_effects(source, node, [node.body, node.orelse])
        if why:
            raise _Declined(why)
        parens = {"lpar": node.lpar, "rpar": node.rpar}
        if guard:
            original = A.code(node.with_changes(lpar=[], rpar=[]))
            text = f"{text} if {G.call(guard)} else {original}"
            start = source.positions[node].start
            if start.column + len(text) + 2 > gm101.LINE_LIMIT and "\n" not in text:
                # libcst indents continuation lines by the enclosing block: relative text here
                outer, inner = "", "    "
                text = f"(\n{inner}{select}({pred.text}, {A.code(node.body)}, {A.code(node.orelse)})\n" \
                       f"{inner}if {G.call(guard)}\n{inner}else {original}\n{outer})"
                parens = {}
        new = cst.parse_expression(text).with_changes(**parens)
        tree = source.replace(source.module, node, new)
        if checker._needs_helper:
            tree = source.with_helper(tree, gm101.SELECT_HELPER, gm101._helper_code(torch_name))
        if not pred.zero_d:
            tree = source.with_helper(tree, A.TRUTH_HELPER, A.truth_code(torch_name))
        if guard:
            tree = source.with_helper(tree, G.HELPER, G.helper_code(torch_name))
            notes.append(f"the select runs when every tensor among `{', '.join(guard)}` is an ordinary strided one "
                         f"(`{G.HELPER}`, static under Dynamo); a sparse, mkldnn, nested, quantized or meta tensor "
                         "gets the original expression, kept after `else`")
        if source.torch_name() is None:
            tree = source.with_import(tree)
        if not ctx.verified:
            notes.append("unverified: found by reading the source")
        return source.fix_from(
            tree,
            rule=self.code,
            title="Replace the tensor-dependent conditional expression with a select",
            safety=safety,
            site=node,
            notes="; ".join(dict.fromkeys(notes)),
        )


def _value_escapes(node: cst.IfExp, source: SourceFile, func: cst.FunctionDef, t: A._Torch) -> Optional[str]:
    """Why the expression's value itself (not a tensor computed from it) may reach the caller or
    be kept, or None: ``return a if c else b``, ``self.h = ...``, ``y = ...`` with ``y`` returned."""
    child, cur = node, source.parent(node)
    while isinstance(cur, cst.IfExp) and child is not cur.test:  # an arm of an enclosing conditional
        child, cur = cur, source.parent(cur)
    if isinstance(cur, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
        return None  # an operator makes a new tensor
    if isinstance(cur, cst.Attribute) and cur.value is child:
        call = source.parent(cur)
        if isinstance(call, cst.Call) and call.func is cur and cur.attr.value in A.FRESH:
            return None  # `(a if c else b).sum()`
    if isinstance(cur, cst.Arg):
        call = source.parent(cur)
        if isinstance(call, cst.Call):
            kind, name = t.func(call.func)
            if kind in ("torch", "F", "method") and name in A.FRESH:
                return None  # `torch.tanh(a if c else b)`
    if isinstance(cur, cst.Assign) and len(cur.targets) == 1 and isinstance(cur.targets[0].target, cst.Name):
        stmt = source.parent(cur)
        return E.escapes_after(func, stmt, source.positions, {cur.targets[0].target.value}, t, A.FRESH)
    if isinstance(cur, cst.Return):
        return f"it is returned at line {source.line(node)}"
    return f"it is stored or passed on as it is at line {source.line(node)}"


def _later_use(node: cst.IfExp, source: SourceFile, func: cst.FunctionDef, t: A._Torch) -> Optional[str]:
    """What the statement around the expression, and the code after it, do with the select and
    with what the arms and the condition read (:mod:`_later`)."""
    modules = E.Modules(source.enclosing(func, (cst.ClassDef,)))  # type: ignore[arg-type]
    grad = not gm101.grad_disabled(source, node)
    values = [node.body, node.orelse]
    why = L.expression_use(node, source.parent, t, modules, grad=grad, values=values)
    if why:
        return why
    stmt = source.parent(node)
    while stmt is not None and not isinstance(stmt, cst.BaseSmallStatement):
        stmt = source.parent(stmt)
    targets = [a.target for a in stmt.targets] if isinstance(stmt, cst.Assign) else \
        [stmt.target] if isinstance(stmt, cst.AnnAssign) else []
    names = {n.value for n in targets if isinstance(n, cst.Name)}
    # where the select lands besides a plain name: unpacked, in a container, stored, appended
    itself, contained, computed = L.expression_holders(node, source.parent, t)
    reads = A.names_in(node.test) | A.names_in(node.body) | A.names_in(node.orelse)
    return L.later_use(func, node, source.positions, t, modules, grad=grad, reads=reads, bound=names,
                       selected={n: values for n in names | itself | contained | computed}, known_fresh=A.FRESH,
                       bare=itself, contained=frozenset(contained))


def _lowest(a: Safety, b: Safety) -> Safety:
    return a if a.rank >= b.rank else b
