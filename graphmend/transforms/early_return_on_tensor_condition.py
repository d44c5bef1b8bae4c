"""GM102 early-return-on-tensor-condition: ``if c: return a`` followed by the rest of the block.

An early exit on a tensor condition is an ``if`` without ``else`` whose body returns::

    if mask.sum() == 0:
        return hidden
    scaled = hidden * mask
    return scaled / mask.sum()

It is the same program as the ``if``/``else`` whose ``else`` holds everything that followed the
``if`` in its block (when the body returns, nothing after it runs; when it does not, exactly the
rest runs). That ``if``/``else`` is GM101's shape — every branch returns — so this rule writes
it and hands it to GM101's own legality analysis and rewrite (one proof, not a second copy):
the rest must be side-effect free and unable to raise on the path not taken, the returned
values must reconcile, and so on. A GM101 decline is this rule's decline, with its reason.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Fix
from graphmend.transforms import _layout_guard as G
from graphmend.transforms.base import RuleContext, SourceFile, Transform, iter_nodes
from graphmend.transforms.data_dependent_branch import DataDependentBranch, _helper_code
from graphmend.transforms.engine import apply_edits

_GM101 = DataDependentBranch()


def _block_of(source: SourceFile, node: cst.If) -> Optional[cst.IndentedBlock]:
    parent = source.parent(node)
    return parent if isinstance(parent, cst.IndentedBlock) else None


def _returns_only(node: cst.If) -> bool:
    """The body ends in ``return <value>`` and the ``if`` has no ``else``/``elif``."""
    if node.orelse is not None or not isinstance(node.body, cst.IndentedBlock) or not node.body.body:
        return False
    last = node.body.body[-1]
    return (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1
            and isinstance(last.body[0], cst.Return) and last.body[0].value is not None)


def _next_is_return(source: SourceFile, node: cst.If) -> bool:
    block = _block_of(source, node)
    if block is None:
        return False
    stmts = list(block.body)
    index = next(i for i, s in enumerate(stmts) if s is node)
    if index + 1 >= len(stmts):
        return False
    nxt = stmts[index + 1]
    return isinstance(nxt, cst.SimpleStatementLine) and isinstance(nxt.body[0], cst.Return)


_SCOPED = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
           cst.NamedExpr, cst.Global, cst.Nonlocal, cst.Del, cst.Import, cst.ImportFrom)


def _single_assignment(rest: list, func: cst.FunctionDef) -> tuple[list, list[str]]:
    """``rest`` with each simple ``name = value`` that binds a name bound before (in the function
    or earlier in ``rest``) given a fresh name, its later reads following it (SSA renaming).

    The rest ends the function's path (it is the ``else`` of an early return, and GM101 requires
    it to return), so no binding escapes it and a renamed binding computes the same values. Done
    only on straight-line simple statements with nothing that sees names by scope (nested
    functions, lambdas, comprehensions, ``:=``, ``global``, ``del``, ``locals()``); otherwise the
    rest is left as it is and GM101 judges it.
    """
    if not all(isinstance(st, cst.SimpleStatementLine) for st in rest):
        return rest, []
    if any(True for st in rest for _ in iter_nodes(st, _SCOPED)) or any(
            isinstance(c.func, cst.Name) and c.func.value in ("locals", "vars", "eval", "exec")
            for st in rest for c in iter_nodes(st, (cst.Call,))):
        return rest, []
    used = {n.value for n in iter_nodes(func, (cst.Name,))}
    bound = {n.value for n in iter_nodes(func.params, (cst.Name,))}
    in_rest = {id(n) for st in rest for n in iter_nodes(st, (cst.AssignTarget,))}
    for n in iter_nodes(func.body, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.With, cst.AsName)):
        if id(n) not in in_rest:  # a name bound before the `if` (or anywhere else): hoisting must not clobber it
            for t in iter_nodes(getattr(n, "target", None) or getattr(n, "name", None) or n, (cst.Name,)):
                bound.add(t.value)
    current: dict[str, str] = {}
    renamed: list[str] = []
    seen_in_rest: set[str] = set()
    out = []

    class _Reads(cst.CSTTransformer):
        def leave_Name(self, original, updated):  # type: ignore[override]
            return updated.with_changes(value=current[original.value]) if original.value in current else updated

        def leave_Attribute(self, original, updated):  # type: ignore[override]
            return updated.with_changes(attr=original.attr)  # `obj.z` is not the variable z

        def leave_Arg(self, original, updated):  # type: ignore[override]
            return updated.with_changes(keyword=original.keyword)  # `f(z=...)`: a keyword, not a read

    for st in rest:
        small = st.body[0] if len(st.body) == 1 else None
        simple = (isinstance(small, cst.Assign) and len(small.targets) == 1
                  and isinstance(small.targets[0].target, cst.Name))
        if not simple:
            out.append(st.visit(_Reads()))
            if any(isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) for n in iter_nodes(st, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign))):
                return rest, []  # another kind of binding: leave the rest alone
            continue
        name = small.targets[0].target.value
        value = small.value.visit(_Reads())
        target = small.targets[0].target
        if name in seen_in_rest or name in bound:
            fresh = _fresh(name, used)
            used.add(fresh)
            current[name] = fresh
            renamed.append(f"{name} → {fresh}")
            target = target.with_changes(value=fresh)
        else:
            current.pop(name, None)
        seen_in_rest.add(name)
        out.append(st.with_changes(body=[small.with_changes(targets=[small.targets[0].with_changes(target=target)], value=value)]))
    return out, renamed


def _fresh(name: str, used: set[str]) -> str:
    i = 1
    while f"{name}_{i}" in used:
        i += 1
    return f"{name}_{i}"


class EarlyReturnOnTensorCondition(Transform):
    code = "GM102"
    name = "early-return-on-tensor-condition"
    summary = "`if <tensor>: return a` followed by a pure remainder: one return of torch.where(c, a, rest)"
    safety = DataDependentBranch.safety
    categories = (Category.DATA_DEPENDENT_BRANCH,)
    gb_types = DataDependentBranch.gb_types
    # Dynamo's data-dependent branch breaks are filed for GM101; this rule looks at them too.
    shares = ("GM101",)

    docs = {
        "What it does": (
            "Finds an early exit on a tensor condition — an `if` without `else` whose body ends in "
            "`return a`, followed by more statements in the same block — and rewrites it as the "
            "equivalent `if`/`else` (the rest of the block as the `else`) selected with `torch.where` by "
            "GM101: both values computed, one returned."
        ),
        "Why it breaks the graph": (
            "`if tensor:` needs the tensor's value in Python (GB0170, *Data-dependent branching*): the "
            "graph ends at the test and a new one starts on each path."
        ),
        "Example": (
            "```python\n"
            "if (scores < 0).all():\n"
            "    return scores * 0.5\n"
            "weights = torch.sigmoid(scores)\n"
            "return weights * scores\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "if _graphmend_strided(scores):\n"
            "    weights = torch.sigmoid(scores)\n"
            "    return _graphmend_select((scores < 0).all(), scores * 0.5, weights * scores)\n"
            "elif (scores < 0).all():\n"
            "    return scores * 0.5\n"
            "else:\n"
            "    weights = torch.sigmoid(scores)\n"
            "    return weights * scores\n"
            "```\n"
            "(`_graphmend_select` is GM101's helper: `torch.where` when both values have one shape, dtype "
            "and device, the original choice otherwise; `_graphmend_strided` keeps the original code for "
            "sparse, quantized or meta tensors, as GM101 does)."
        ),
        "Fix safety": (
            "Exactly GM101's, on the `if`/`else` the early exit is equal to: the rest of the block runs on "
            "both paths after the rewrite, so it must not raise, write state, print, draw random numbers "
            "or call anything unknown; the two values must be new tensors (not the caller's own object, "
            "e.g. `return x`) that draw gradients from the same tensors, unless the site runs under "
            "`torch.no_grad()`/`inference_mode()`; nested control flow in it (a loop, another `if` that does "
            "not reconcile) is declined by GM101 with its reason. Declined here: an `if` with `else`/`elif` "
            "(GM101's), a body that does not end in `return <value>`, an `if` that is the last statement "
            "of its block, and an `if` that is not in an indented block of a function."
        ),
        "References": "GM101 (data-dependent-branch); DESIGN.md, *Predicated control flow*; GB0170.",
    }

    VALID = (
        # A Python condition: no graph break.
        "import torch\n\n\ndef f(x, training):\n    if training:\n        return x\n    y = x * 2\n    return y\n",
        # The rest prints: it would run on both paths.
        "import torch\n\n\ndef f(x):\n    if x.sum() > 0:\n        return x * 2\n    print('negative')\n    return -x\n",
        # The rest does not return a value on every path.
        "import torch\n\n\ndef f(x, out):\n    if x.sum() > 0:\n        return x * 2\n    out.add_(x)\n",
        # `if c: return a` + `return b`: GM101's shape, not this rule's.
        "import torch\n\n\ndef f(x):\n    if x.sum() > 0:\n        return x\n    return -x\n",
        # Nothing follows the `if`.
        "import torch\n\n\ndef f(x):\n    y = x * 2\n    if x.sum() > 0:\n        return y\n",
    )

    INVALID = (
        (
            "import torch\n\n\ndef f(x):\n    h = x * 2\n    if h.sum() > 0:\n        return h + 1\n    y = h.abs()\n    return y - 1\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + _helper_code("torch") + "\n\n"
            "def f(x):\n    h = x * 2\n    if _graphmend_strided(h):\n        y = h.abs()\n"
            "        return _graphmend_select(h.sum() > 0, h + 1, y - 1)\n    elif h.sum() > 0:\n        return h + 1\n"
            "    else:\n        y = h.abs()\n        return y - 1\n",
        ),
        # Nested in a loop body: the rest of the loop's block becomes the `else`.
        (
            "import torch\n\n\ndef f(xs):\n    for x in xs:\n        if x.sum() > 0:\n            return x + 1\n"
            "        y = x * 2\n        return y - 1\n    return xs[0]\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + _helper_code("torch") + "\n\n"
            "def f(xs):\n    for x in xs:\n        if _graphmend_strided(x):\n            y = x * 2\n"
            "            return _graphmend_select(x.sum() > 0, x + 1, y - 1)\n        elif x.sum() > 0:\n"
            "            return x + 1\n        else:\n            y = x * 2\n            return y - 1\n"
            "    return xs[0]\n",
        ),
    )

    # -- sites --------------------------------------------------------------------------------

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for node in iter_nodes(source.module, (cst.If,)):
            if not _returns_only(node) or source.enclosing(node, (cst.FunctionDef,)) is None:  # type: ignore[arg-type]
                continue
            parent = source.parent(node)
            if isinstance(parent, cst.If) and parent.orelse is node:
                continue  # an elif
            if _next_is_return(source, node):
                continue  # `if c: return a` + `return b` is GM101's own shape
            yield node

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        return _GM101.site_lines(node, source)

    def static_candidate(self, node: cst.CSTNode, source: SourceFile) -> bool:
        return _GM101.static_candidate(node, source)

    # -- the rewrite --------------------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.If)
        block = _block_of(source, node)
        if block is None:
            return self.decline(source, node, "the `if` is not in an indented block of a function")
        stmts = list(block.body)
        index = next(i for i, s in enumerate(stmts) if s is node)
        rest = stmts[index + 1:]
        if not rest:
            return self.decline(source, node, "nothing follows the early return in its block; without a value on "
                                "the other path there is nothing to select (the function returns None there)")
        func = source.enclosing(node, (cst.FunctionDef,))
        assert isinstance(func, cst.FunctionDef)
        rest, renamed = _single_assignment(rest, func)
        # The same program: the rest of the block as the `else` of the early exit.
        as_else = node.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=rest)))
        new_block = block.with_changes(body=stmts[:index] + [as_else])
        text = source.module.deep_replace(block, new_block).code  # type: ignore[union-attr]
        shaped = SourceFile(source.path, text)
        target = next((n for n in iter_nodes(shaped.module, (cst.If,))
                       if shaped.line(n) == source.line(node) and n.orelse is not None), None)
        if target is None:  # pragma: no cover - the `if` keeps its line: nothing above it changed
            return self.decline(source, node, "the `if`/`else` form could not be located")
        outcome = _GM101.rewrite(target, shaped, ctx)
        if isinstance(outcome, Decline):
            return self.decline(source, node, f"as `if`/`else` (the rest of the block as the `else`): {outcome.reason}")
        final = apply_edits(text, outcome.edits)
        fix = source.fix_from(
            cst.parse_module(final),
            rule=self.code,
            title="select the early return's value and the rest's with torch.where",
            safety=outcome.safety,
            site=node,
            notes=("`if c: return a` followed by the rest of its block is `if c: return a` / `else: <rest>`; "
                   + (f"names bound again in the rest renamed once each ({', '.join(renamed)}); " if renamed else "")
                   + f"that form is GM101's. {outcome.notes}").strip(),
        )
        return fix if fix.edits else self.decline(source, node, "GM101 changed nothing")

