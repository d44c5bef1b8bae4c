"""GM101 data-dependent-branch: a Python ``if`` on a tensor value, rewritten to ``torch.where``.

Dynamo cannot trace a jump whose direction depends on a tensor's value (GB0170 "Data-dependent
branching"): it ends the graph, runs the ``if`` in Python, and starts a new graph. When both
branches only compute values, evaluating both and selecting with ``torch.where`` gives the same
result in one graph. This module proves, from the source, every condition under which that is
true (DESIGN.md, "Predicated control flow") and declines the site with the reason otherwise.

Three reconciling shapes are recognised:

* **assignment** — every branch ends by assigning the same names (``x = a`` / ``x = b``; an
  else-less ``if c: x = f(x)`` keeps ``x`` on the other path): ``x = torch.where(c, a, b)``;
* **return** — every branch returns (an else-less ``if c: return a`` followed directly by
  ``return b`` counts): ``return torch.where(c, a, b)``;
* **call** — the same call in every branch, differing only in positional arguments:
  ``f(torch.where(c, a, b), k=1)`` (the call itself runs once, as before).

``elif`` chains become nested selects. Statements before the selected assignments that only
bind names used inside the ``if`` (``clamp_value = torch.finfo(h.dtype).max - 1000``) are
hoisted when they are free of side effects. A static conjunct (``h.dtype == torch.float16
and …``) stays a Python ``if`` around the select. The condition is copied as written (``or``
becomes ``|``), so a whole-tensor action guarded by ``.any()`` keeps its 0-d condition and is
never turned into an element-wise select.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Fix, Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms import _effects as E
from graphmend.transforms import _layout_guard as G
from graphmend.transforms import _later as L
from graphmend.transforms import _merged as M
from graphmend.transforms import _reads as R
from graphmend.transforms.base import RuleContext, SourceFile, Transform, iter_nodes

LINE_LIMIT = 100
SELECT_HELPER = A.SELECT_HELPER_NAME


def _helper_code(torch_name: str) -> str:
    return f'''def {SELECT_HELPER}(condition, if_true, if_false):
    """torch.where when the condition and both values are tensors (the values of one shape, dtype
    and device), else the `if`.

    torch.where broadcasts a [3] value against a [1, 3] one, promotes float16 against
    bfloat16 and has no kernel for sparse layouts or quantized values, and decides a meta
    condition the `if` could not; these checks are static under Dynamo (no
    graph break), and when they fail the value is chosen exactly as the original `if` chose it.
    """
    if (
        isinstance(condition, {torch_name}.Tensor)
        and isinstance(if_true, {torch_name}.Tensor)
        and isinstance(if_false, {torch_name}.Tensor)
        and if_true.shape == if_false.shape
        and if_true.dtype == if_false.dtype
        and if_true.device == if_false.device
        and condition.layout == if_true.layout == if_false.layout == {torch_name}.strided
        and condition.device.type != "meta"
        and not (if_true.is_quantized or if_false.is_quantized)
    ):
        return {torch_name}.where(condition, if_true, if_false)
    return if_true if condition else if_false
'''


# The sparse-layout part of the "Fix safety" docs, shared with GM402.
SPARSE_SAFETY = (
    "Tensors that are not ordinary strided ones: the proof that the value not taken cannot raise holds for "
    "strided tensors only, and a sparse (COO, CSR …), mkldnn, nested, quantized or meta tensor lacks kernels "
    "it may use (`x - 1`, `clamp`, `masked_fill` on sparse COO; `torch.where` itself). So the select runs "
    "under `if _graphmend_strided(<what the site reads>):` and the original statement is kept as its `elif` "
    "(for an expression: `<select> if _graphmend_strided(...) else <the original>`): a tensor among the "
    "operands (a list, tuple or dict among them is looked into) that is not strided, dense, unquantized and "
    "off the meta device runs exactly the original code. The check is static under Dynamo (no graph break, "
    "no recompilation on strided inputs), and Dynamo runs frames with sparse or quantized tensors eagerly. "
    "An arm that makes such a tensor itself (`layout=`, `torch.sparse.*`, `.to_sparse()`) is declined. The guard "
    "reads its operands once more than the original did, and the select reads both values: every attribute the "
    "site reads must be one that cannot raise or run code — a tensor's metadata, torch's constants, a module's "
    "attribute (`tables.W`), or `self.<name>` bound at the top of `__init__` only to tensors, registered buffers "
    "or parameters, or numbers (a vetted torch.nn module's `weight`); a property or other descriptor (its getter "
    "would run on every read), `.grad` (None before backward), an attribute that may be None or missing "
    "(`self.memory.keys`, one set only by another method), `.imag` of a real tensor, or an attribute of any other "
    "object declines the site, naming the read. Not "
    "covered: an mkldnn tensor under torch.compile (Dynamo traces it as a strided one, so no check can tell), "
    "and a tensor reached only through an object the site calls (`self.proj(x)` is declined anyway)."
)


class _Declined(Exception):
    """Raised inside the analysis to stop at the first failed condition; becomes a Decline."""


@dataclass
class _Arm:
    setups: list[cst.BaseSmallStatement]
    targets: list[tuple[str, cst.BaseExpression, Optional[cst.Annotation]]]  # name, value, annotation
    ret: Optional[cst.BaseExpression] = None
    call_stmt: Optional[cst.BaseSmallStatement] = None


class DataDependentBranch(Transform):
    code = "GM101"
    name = "data-dependent-branch"
    summary = "Python `if` on a tensor value whose branches only compute values: select with torch.where"
    safety = Safety.SAFE
    categories = (Category.DATA_DEPENDENT_BRANCH,)
    gb_types = ("Data-dependent branching", "Data-dependent branching with non-constant __bool__")

    docs = {
        "What it does": (
            "Finds a Python `if` whose condition is a tensor and whose branches only compute values, "
            "and rewrites it so that both branches are computed and `torch.where` selects the result. "
            "Three shapes reconcile: the same variables assigned in every branch (an `if` without `else` "
            "keeps the old value), every branch returning, or the same call with different positional "
            "arguments. `elif` chains become nested selects; a static part of the condition such as "
            "`h.dtype == torch.float16` stays a Python `if`."
        ),
        "Why it breaks the graph": (
            "`if tensor:` asks for the tensor's value in Python. Dynamo cannot trace a jump that depends "
            "on a value it only knows at run time (GB0170, *Data-dependent branching*), so it ends the "
            "graph, runs the `if` eagerly and starts another graph after it: two graphs, a device "
            "synchronisation, and guards on both sides."
        ),
        "Example": (
            "```python\n"
            "if hidden.dtype == torch.float16 and (torch.isinf(hidden).any() or torch.isnan(hidden).any()):\n"
            "    clamp_value = torch.finfo(hidden.dtype).max - 1000\n"
            "    hidden = torch.clamp(hidden, min=-clamp_value, max=clamp_value)\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "if hidden.dtype == torch.float16 and _graphmend_strided(hidden):\n"
            "    clamp_value = torch.finfo(hidden.dtype).max - 1000\n"
            "    hidden = torch.where(torch.isinf(hidden).any() | torch.isnan(hidden).any(), "
            "torch.clamp(hidden, min=-clamp_value, max=clamp_value), hidden)\n"
            "elif hidden.dtype == torch.float16 and (torch.isinf(hidden).any() or torch.isnan(hidden).any()):\n"
            "    clamp_value = torch.finfo(hidden.dtype).max - 1000\n"
            "    hidden = torch.clamp(hidden, min=-clamp_value, max=clamp_value)\n"
            "```\n"
            "The condition stays 0-d (`.any()`): the whole tensor is clamped or kept, exactly as before. The "
            "original `if` stays as the `elif` for a sparse, quantized or meta `hidden`, on which the select is "
            "not proven (`_graphmend_strided` is static under Dynamo: no graph break)."
        ),
        "Fix safety": (
            "Safe when every condition is shown on the source: the condition is a tensor (not `.item()`, "
            "`torch.equal`, `allclose`, a Python bool); the branch not taken cannot raise, write state "
            "(in-place ops, attribute or buffer writes), draw random numbers, or call anything unknown "
            "(only known pure torch operations are accepted; integer division and computed indices are "
            "refused; an operation that raises or warns for some dtypes, such as `-mask`, `mask - 1` or "
            "`mask.abs()` on a bool tensor, `x ** -1` or `x.softmax(-1)` on an integer one, `~x` or `x & y` on a "
            "floating-point one, `x.clamp(0)`, `x > 0` or `x.sign()` on a complex one, `x.masked_fill(m, 0)` with a "
            "mask not shown to be bool, `z.float()` of a complex tensor (a warning), makes the fix unsafe unless the "
            "tensor's dtype is shown, by `x.dtype == torch.float16` in the condition, by an op of the condition "
            "itself that would have raised, as `(x > 0).any()` does for a complex `x`, or by the assignment that "
            "reaches the site: `h = self.lin(x)` with `self.lin` only ever a torch.nn Linear, Conv, Embedding or norm "
            "layer is floating point or complex, never bool, so `h - 1` stays safe; `m = x > 0` is bool; a function's "
            "argument may be of any dtype); the same call in every branch is declined when one branch hands it the caller's own "
            "tensor and the callee may keep or return it (`cache.append(x)`, `tuple(x)`); no branch transfers control (`break`, `continue`, `raise`, a lone `return`); no "
            "branch gives `None` or a Python number; the selected variables are not updated in place "
            "elsewhere in the function (the select returns a new tensor, not an alias). A condition that "
            "is not evidently one element goes through `_graphmend_truth`, which raises the `if`'s own "
            "\"Boolean value of Tensor with more than one value is ambiguous\" error instead of letting "
            "`where` broadcast it; a condition only Dynamo's report shows to be a tensor may be a Python value "
            "on another call (`if gate:` given None), so it goes through `_graphmend_select`, which decides such a "
            "value by its truth as the `if` did. The rewrite assumes both branches give the same shape and dtype (`where` "
            "would broadcast or promote); evident mismatches are declined, the rest goes through "
            "`_graphmend_select`, which checks them. Where gradients may flow (no enclosing "
            "`torch.no_grad()`/`inference_mode()`) the site is declined when the branches draw gradients "
            "from different tensors (`where`'s result requires grad when either branch does, and the tensors "
            "of the branch not taken get a zero gradient instead of None; buffers the class registers count as "
            "never requiring grad), and when a branch may be inf/NaN in value or gradient: `log`, `sqrt`, division, "
            "`pow`, `exp`, or an op not known to be finite in backward (`x * x`, `x.tanh()`) on a value not proven "
            "finite (an argument, scores with an additive `-inf` mask), since the untaken branch's gradient is "
            "multiplied by zero and 0 * inf is NaN; a branch no gradient reaches (only buffers and constants) "
            "is exempt. A returned value that may be the caller's own "
            "object (an argument, `self.weight`, `x.detach()`, a no-op `.float()`) is declined: `where` "
            "returns a new tensor; so is an assigned one that leaves the function "
            "(returned, stored, passed on) or is written later. " + SPARSE_SAFETY + " Static (unverified) candidates are applied only with `--unsafe-fixes`. "
            "`torch.cond` is never used: under torch 2.13 it traces both branches and fails on branches valid "
            "only under their predicate."
        ),
        "References": (
            "GraphMend (predicated control flow); PyTorch docs: `torch.where`, "
            "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html ; "
            "Dynamo graph-break registry GB0170."
        ),
    }

    VALID = (
        # A Python bool: not a graph break, nothing to do.
        "import torch\n\ndef f(x, training):\n    if training:\n        x = x * 2\n    return x\n",
        # A side effect in the branch: declined, so unchanged.
        "import torch\n\ndef f(x):\n    if x.sum() > 0:\n        print('positive')\n    return x\n",
        # .item() predicate: the call is the break; torch.where cannot take a Python bool.
        "import torch\n\ndef f(x):\n    if x.sum().item() > 0:\n        x = x * 2\n    return x\n",
        # A random draw in the branch.
        "import torch\n\ndef f(x):\n    if x.any():\n        x = torch.nn.functional.dropout(x, 0.5)\n    return x\n",
        # break inside the branch.
        "import torch\n\ndef f(xs):\n    for x in xs:\n        if (x > 0).all():\n            break\n    return xs\n",
    )

    INVALID = (
        # Shapes and dtypes cannot be proven alike from the source (x may be a bool tensor):
        # the checked helper selects with torch.where when they agree and otherwise behaves
        # exactly like the `if`.
        (
            "import torch\n\n\ndef f(x):\n    if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x - 1\n    return y\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + _helper_code("torch") + "\n\n"
            "def f(x):\n    if _graphmend_strided(x):\n        y = _graphmend_select(x.sum() > 0, x * 2, x - 1)\n"
            "    elif x.sum() > 0:\n        y = x * 2\n    else:\n        y = x - 1\n    return y\n",
        ),
        # A static conjunct stays a Python `if`; it also proves the dtype, so plain torch.where. On
        # tensors that are not ordinary strided ones (sparse, quantized, meta …) the original runs.
        (
            "import torch\n\ndef f(x):\n    # keep me\n    if x.is_floating_point() and (x > 1).any():\n"
            "        x = x.clamp(max=1.0)\n    return x + 1\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n"
            "def f(x):\n    # keep me\n    if x.is_floating_point() and _graphmend_strided(x):\n"
            "        x = torch.where((x > 1).any(), x.clamp(max=1.0), x)\n"
            "    elif x.is_floating_point() and (x > 1).any():\n        x = x.clamp(max=1.0)\n    return x + 1\n",
        ),
        # The fp16 overflow clamp of the BART family: a 0-d condition, never element-wise.
        (
            "import torch\n\n\ndef f(residual, h):\n"
            "    h = residual + h\n"
            "    if h.dtype == torch.float16 and (\n"
            "        torch.isinf(h).any() or torch.isnan(h).any()\n"
            "    ):\n"
            "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
            "        h = torch.clamp(h, min=-clamp_value, max=clamp_value)\n"
            "    return h\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n"
            "def f(residual, h):\n"
            "    h = residual + h\n"
            "    if h.dtype == torch.float16 and _graphmend_strided(h):\n"
            "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
            "        h = torch.where(\n"
            "            torch.isinf(h).any() | torch.isnan(h).any(),\n"
            "            torch.clamp(h, min=-clamp_value, max=clamp_value),\n"
            "            h,\n"
            "        )\n"
            "    elif h.dtype == torch.float16 and (\n"
            "        torch.isinf(h).any() or torch.isnan(h).any()\n"
            "    ):\n"
            "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
            "        h = torch.clamp(h, min=-clamp_value, max=clamp_value)\n"
            "    return h\n",
        ),
        # Both paths return.
        (
            "import torch\n\ndef f(x):\n    if x.mean() > 0:\n        return x.masked_fill(x < 0, 0)\n    return x.clone()\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n"
            "def f(x):\n    if _graphmend_strided(x):\n"
            "        return torch.where(x.mean() > 0, x.masked_fill(x < 0, 0), x.clone())\n"
            "    elif x.mean() > 0:\n        return x.masked_fill(x < 0, 0)\n    return x.clone()\n",
        ),
        # elif chain: nested selects.
        (
            "import torch\n\ndef f(x):\n    if x.max() > 2:\n        y = x.masked_fill(x > 2, 2)\n    elif x.max() > 1:\n"
            "        y = x.masked_fill(x > 1, 1)\n    else:\n        y = x.clone()\n    return y\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n"
            "def f(x):\n    if _graphmend_strided(x):\n        y = torch.where(\n            x.max() > 2,\n"
            "            x.masked_fill(x > 2, 2),\n"
            "            torch.where(x.max() > 1, x.masked_fill(x > 1, 1), x.clone()),\n        )\n"
            "    elif x.max() > 2:\n        y = x.masked_fill(x > 2, 2)\n    elif x.max() > 1:\n"
            "        y = x.masked_fill(x > 1, 1)\n    else:\n        y = x.clone()\n    return y\n",
        ),
        # The same call with different positional arguments: the call runs once, as before.
        (
            "import torch\n\ndef f(x, w):\n    if (x > 0).all():\n        out = torch.nn.functional.linear(x.clamp(max=1.0), w)\n    else:\n"
            "        out = torch.nn.functional.linear(x, w)\n    return out\n",
            "import torch\n\n\n" + G.helper_code("torch") + "\n\n" + _helper_code("torch") + "\ndef f(x, w):\n"
            "    if _graphmend_strided(x, w):\n"
            "        out = torch.nn.functional.linear(_graphmend_select((x > 0).all(), x.clamp(max=1.0), x), w)\n"
            "    elif (x > 0).all():\n        out = torch.nn.functional.linear(x.clamp(max=1.0), w)\n    else:\n"
            "        out = torch.nn.functional.linear(x, w)\n    return out\n",
        ),
    )

    # -- sites ------------------------------------------------------------------------

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for node in A._iter(source.module):
            if not isinstance(node, cst.If):
                continue
            parent = source.parent(node)
            if isinstance(parent, cst.If) and parent.orelse is node:
                continue  # an elif: handled with the chain it belongs to
            if source.enclosing(node, (cst.FunctionDef,)) is None:
                continue  # module or class level: never inside a compiled region
            if G.is_guard(node.test):
                continue  # an earlier fix: the kept original runs only for tensors that are not strided
            yield node

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        # Dynamo reports the jump of any test in the chain, elif tests included.
        start = source.line(node)
        end = source.header_lines(node).stop - 1
        cur = node.orelse  # type: ignore[attr-defined]
        while isinstance(cur, cst.If):
            end = max(end, source.header_lines(cur).stop - 1)
            cur = cur.orelse
        return range(start, end + 1)

    def static_candidate(self, node: cst.CSTNode, source: SourceFile) -> bool:
        # Without a Dynamo report only conditions that evidently involve a tensor are looked
        # at, so a plain `if training:` is neither rewritten nor reported.
        return _looks_tensorish(node.test, A.torch_names_of(source.module))  # type: ignore[attr-defined]

    # -- the proof --------------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.If)
        try:
            return self._rewrite(node, source, ctx)
        except _Declined as exc:
            return self.decline(source, node, str(exc))

    def _rewrite(self, node: cst.If, source: SourceFile, ctx: RuleContext) -> Fix:  # noqa: C901
        t = A.torch_names_of(source.module)
        func = source.enclosing(node, (cst.FunctionDef,))
        if func is None:
            raise _Declined("the `if` is not inside a function; Dynamo compiles functions")
        torch_name = source.torch_name() or "torch"
        notes: list[str] = []
        safety = Safety.SAFE
        attr_reads = R.Reads(source, func, t.torch_names | t.f_names)

        # 1. the chain: [(test, arm statements)], final arm (None when there is no else)
        chain: list[tuple[cst.BaseExpression, list[cst.BaseSmallStatement]]] = [(node.test, _arm_statements(node.body))]
        final: Optional[list[cst.BaseSmallStatement]] = None
        cur = node.orelse
        while cur is not None:
            if isinstance(cur, cst.If):
                chain.append((cur.test, _arm_statements(cur.body)))
                cur = cur.orelse
            else:
                final = _arm_statements(cur.body)
                cur = None

        # 2. the conditions
        conjuncts = A.split_conjuncts(node.test)
        static = [c for c in conjuncts if A.is_static(c, t)]
        tensor_parts = [c for c in conjuncts if not A.is_static(c, t)]
        if not tensor_parts:
            raise _Declined(f"the condition `{A.code(node.test)}` is a Python value, not a tensor")
        if static and len(chain) > 1:
            raise _Declined("a static conjunct together with `elif` branches: the Python `if` cannot be kept apart")
        # what the static conjuncts (`h.dtype == torch.float16`) and the assignments before the
        # site (`h = self.lin(x)`) tell about dtypes
        known = {**site_dtypes(source, func, node, t, attr_reads), **_known_dtypes(static, t)}
        conds: list[A.Predicate] = []
        cond_texts: list[str] = []
        tests = [_and_of(tensor_parts)] + [test for test, _ in chain[1:]]
        evaluated: set[str] = set()  # attribute chains the original reads on every call, first
        for i, test in enumerate(tests):
            parts = tensor_parts if i == 0 else [test]
            preds = []
            for part in parts:
                if len(parts) > 1 and A.tensor_kind(part, t) == "unknown":
                    # `self.clip and (x > t).any()`: if `self.clip` is a Python bool, `and` skips
                    # the rest when it is false, and `.bool()` on it would raise.
                    raise _Declined(f"cannot show that `{A.code(part)}` is a tensor; if it is a Python value, "
                                    "`and` decides on it alone and tensor methods on it would raise")
                try:
                    preds.append(A.tensor_predicate(part, t, trusted=ctx.verified))
                except A.NotATensor as exc:
                    raise _Declined(str(exc)) from None
                for k, leaf in enumerate(A.bool_leaves(part)):
                    # `a or b` became `a | b`, and an elif test is evaluated even when an
                    # earlier test held: such a leaf now runs where it did not before.
                    first = i == 0 and k == 0 and part is parts[0]
                    if first:
                        evaluated |= {A.code(n) for n in iter_nodes(leaf, (cst.Attribute,))}
                    eff = A.effects(leaf, t, attr_reads.why_evaluated if first else attr_reads.why)
                    if not eff.ok:
                        raise _Declined(f"the condition {eff.problems[0]}")
                    fallible = None if first else A.shape_fallible(leaf, t, frozenset(), known)
                    if fallible:
                        safety = Safety.UNSAFE
                        notes.append(f"`{fallible}` in the condition now runs where `and`/`or`/`elif` skipped it, "
                                     "and may raise for some shapes")
            conds.extend(preds)
            if not all(p.zero_d for p in preds):
                notes.append(f"the condition is not evidently one element; `{A.TRUTH_HELPER}` raises what `if` raised "
                             "for several or no elements instead of letting `where` broadcast it")
            if any(not p.zero_d and (i > 0 or k > 0 or isinstance(p.node, cst.BooleanOperation)) for k, p in enumerate(preds)):
                safety = Safety.UNSAFE
                notes.append("a condition that is not evidently one element now runs where `and`/`or`/`elif` skipped "
                             "it, and may raise the \"ambiguous\" error where the original did not")
            cond_texts.append(" & ".join(_paren(p.text) if len(preds) > 1 else p.text for p in preds))
        # `if (x > 0) and x.dtype == torch.float16:` evaluates the tensor part first, and it may
        # raise; the kept `if x.dtype == ...:` skips it whenever the static part is false.
        for k, part in enumerate(conjuncts):
            later_static = any(c in static for c in conjuncts[k + 1:])
            if part in static or not later_static:
                continue
            fallible = A.shape_fallible(part, t, frozenset(), {})
            if fallible or A.tensor_kind(part, t) not in ("bool0", "num0"):
                safety = Safety.UNSAFE
                notes.append(f"`{fallible or A.code(part)}` comes before the static part of the condition, which now "
                             "decides first: where that part is false the original still evaluated it, and it may raise "
                             "(shapes that do not broadcast, a condition of several elements)")
        for part in static:
            eff = A.effects(part, t)
            if not eff.ok and not isinstance(part, cst.Comparison):
                raise _Declined(f"the static part of the condition {eff.problems[0]}")
            # it runs twice where it is false (the guarded `if`, then the kept original)
            why = attr_reads.check(part)
            if why:
                raise _Declined(f"the static part of the condition {why}, and it is evaluated again after the rewrite")

        # a condition trusted from Dynamo's report may be a Python value on another call: the
        # select helper then chooses as the `if` did (torch.where takes tensors only)
        self.begin_site(source, func, node, known, untyped=any(not p.typed for p in conds),
                        facts=A.dtype_facts(tests[0], t, known))

        # 3. the arms and the reconciling shape
        arms_stmts = [stmts for _, stmts in chain] + ([final] if final is not None else [])
        for stmts in arms_stmts:
            _refuse_control_flow(stmts, allow_final_return=True)
        following_return: Optional[cst.SimpleStatementLine] = None
        returns = [bool(s) and isinstance(s[-1], cst.Return) for s in arms_stmts]
        if any(returns):
            if final is None and all(returns):
                following_return = _next_return(node, source)
                if following_return is None:
                    raise _Declined("`return` inside the branch, and the `if` has no `else` and is not followed by a `return`")
                arms_stmts.append(list(following_return.body))
            elif not all(returns):
                raise _Declined("`return` inside only some branches: torch.where cannot select control flow")
            for stmts in arms_stmts:
                if stmts[-1].value is None:  # type: ignore[attr-defined]
                    raise _Declined("a bare `return` (None) in a branch: torch.where cannot select None")
            shape = "return"
        else:
            shape = "assign"
        call_shape = _call_shape(arms_stmts, final is not None or following_return is not None)
        if call_shape is not None:
            shape = "call"

        names_outside = _names_outside(func, node, following_return)
        # What the site reads: the select runs only when every tensor among them is an ordinary
        # strided one; any other (sparse, quantized, meta …) runs the original `if`, kept below it.
        local = _assigned_in(func) | _param_names(func)
        guard = G.operands([node, following_return], local, lambda n: _bound_before(n, node, func, source),
                           G.Scope(source.module, t))
        nested = bool(static or guard)
        test_names = set().union(*(A.names_in(test) for test, _ in chain))

        lines: list[str] = []
        # 4. setups (hoisted) and the selected values
        arms = [_split_arm(stmts, names_outside, test_names, shape) for stmts in arms_stmts]
        setup_names: list[set[str]] = []
        self._setup_values = _single_assignments([s for arm in arms for s in arm.setups])
        for arm in arms:
            names: set[str] = set()
            for s in arm.setups:
                value = s.value  # type: ignore[attr-defined]
                eff = A.effects(value, t, self._reads.why, self._scalars)
                if not eff.ok:
                    raise _Declined(f"the setup statement `{A.code(s)}`: {eff.problems[0]}; it cannot be hoisted")
                if eff.nan_prone and not self._no_grad:
                    raise _Declined(_nan_reason(eff.nan_prone[0]))
                fallible = A.shape_fallible(value, t, self._scalars, self._dtypes)
                if fallible:
                    safety = Safety.UNSAFE
                    notes.append(f"the setup `{fallible}` now runs on both paths and may raise for some shapes or dtypes")
                names.add(_assigned_name(s))
                if A.is_python_scalar(value, t, self._scalars):
                    self._scalars = self._scalars | {_assigned_name(s)}
            setup_names.append(names)
        for i, arm in enumerate(arms):
            others = set().union(*(setup_names[j] for j in range(len(arms)) if j != i))
            used = set().union(*(A.names_in(s) for s in arm.setups), *(A.names_in(v) for _, v, _ in arm.targets)) if (arm.setups or arm.targets) else set()
            if arm.ret is not None:
                used |= A.names_in(arm.ret)
            if arm.call_stmt is not None:
                used |= A.names_in(arm.call_stmt)
            clash = sorted(used & others)
            if clash:
                raise _Declined(f"`{clash[0]}` is set up differently in each branch; hoisting both would mix them")
        self._value_dtypes = A.dtypes_after_setups(
            self._value_dtypes, self._dtypes, [(_assigned_name(s), s.value if isinstance(s, cst.Assign) else None)
                                               for arm in arms for s in arm.setups], t, self._scalars)
        for arm in arms:
            lines.extend(A.code(s) for s in arm.setups)

        multiple = False
        identity: Optional[str] = None
        if shape == "assign":
            order = _target_order(arms)
            if not order:
                raise _Declined("the branches assign nothing outside the `if`: nothing to select")
            multiple = len(order) > 1
            declared = _declared_global(func)
            shared = sorted(set(order) & declared)
            if shared:
                raise _Declined(f"`{shared[0]}` is declared global/nonlocal: selecting would rebind it on both paths")
            for name in order:
                if not _bound_before(name, node, func, source):
                    if any(all(n != name for n, _, _ in arm.targets) for arm in arms) or final is None:
                        raise _Declined(
                            f"`{name}` is not assigned on every path and is not bound before the `if`; "
                            "the select would read an unbound name"
                        )
            selected_names = set(order)
            # As the return form and GM402 do: no select gives the caller back its own object
            # (declined after every other check, so that the more specific reason comes first).
            identity = _identity_escape(source, func, node, arms, final is None, t)
            modules = E.Modules(source.enclosing(func, (cst.ClassDef,)))  # type: ignore[arg-type]
            classes = E.alias_classes(func, t, A.FRESH, modules)
            # A selected name that holds a tensor made here, which no other name may share, can be
            # written later without anyone seeing which object it is.
            private = {n for n in selected_names if classes.get(n, {n}) <= {n}
                       and E.reaching_fresh(func, node, n, source.parent, t, A.FRESH, modules)}
            hazard = L.alias_hazard(source, func, node, (selected_names - private) | _value_names(arms, t), t)
            if hazard:
                raise _Declined(f"{hazard}; torch.where returns a new tensor, so that update would no longer "
                                "reach the tensor the original program wrote")
        # A local read in a branch must be bound on the other path too, where it now runs.
        local = _assigned_in(func)
        for i, arm in enumerate(arms):
            own = {_assigned_name(st) for st in arm.setups} | {n for n, _, _ in arm.targets}
            reads: set[str] = set()
            call_args = [a.value for a in _call_of(arm.call_stmt).args] if arm.call_stmt is not None else []
            for value in [*(st.value for st in arm.setups), *(v for _, v, _ in arm.targets), arm.ret, *call_args]:  # type: ignore[attr-defined]
                if value is not None:
                    reads |= A.names_in(value)
            for name in sorted((reads & local) - own):
                if not _bound_before(name, node, func, source):
                    raise _Declined(f"`{name}` may be unbound where its branch is not taken, and it is read there after the rewrite")
        cond_refs = list(cond_texts)
        if multiple or (shape == "assign" and len(chain) > 1 and len(_target_order(arms)) > 1):
            temp_names = _fresh_names(func, len(cond_texts))
            for name, text in zip(temp_names, cond_texts):
                lines.append(f"{name} = {text}")
            cond_refs = temp_names

        # libcst keeps continuation lines relative to the enclosing block's indentation, so
        # the generated text is indented as it will be parsed (inside a kept `if`: 4), while
        # the line-length check uses the real column.
        indent = _Indent(source.positions[node].start.column + (4 if nested else 0), "    " if nested else "")
        if call_shape is None and arms[0].ret is None:
            for name in _target_order(arms):
                values = []
                annotation = None
                for arm in arms:
                    found = [(v, ann) for n, v, ann in arm.targets if n == name]
                    if found:
                        values.append(found[0][0])
                        annotation = annotation or found[0][1]
                    else:
                        values.append(cst.Name(name))
                if final is None:
                    values.append(cst.Name(name))
                safety = self._check_values(values, name, t, notes, safety)
                expr = _nested_where(self._select_fn(torch_name), cond_refs, [A.code(v) for v in values])
                ann = f": {A.code(annotation.annotation)}" if annotation is not None else ""
                lines.append(_fit(f"{name}{ann} = ", expr, indent))
        elif shape == "return":
            values = [arm.ret for arm in arms]
            returned = [e.value for v in values for e in v.elements] if all(isinstance(v, cst.Tuple) for v in values) else values
            for v in returned:
                outside = L.outside_roots(source, func, node, [v], t)  # type: ignore[list-item]
                if outside:
                    raise _Declined(L.identity_reason(A.code(v), sorted(outside)[0]))  # type: ignore[arg-type]
            if all(isinstance(v, cst.Tuple) for v in values):
                sizes = {len(v.elements) for v in values}  # type: ignore[union-attr]
                if len(sizes) != 1:
                    raise _Declined("the branches return tuples of different lengths")
                parts = []
                for k in range(sizes.pop()):
                    elems = [v.elements[k].value for v in values]  # type: ignore[union-attr]
                    safety = self._check_values(elems, f"returned item {k}", t, notes, safety)
                    parts.append(_nested_where(self._select_fn(torch_name), cond_refs, [A.code(e) for e in elems]))
                lines.append(_fit("return ", ", ".join(parts), indent))
            else:
                safety = self._check_values(values, "the returned value", t, notes, safety)  # type: ignore[arg-type]
                lines.append(_fit("return ", _nested_where(self._select_fn(torch_name), cond_refs, [A.code(v) for v in values]), indent))  # type: ignore[arg-type]
        else:
            stmt, differing = call_shape  # type: ignore[misc]
            call = _call_of(stmt)
            chosen = set().union(*(E.alias_roots(_call_of(arm.call_stmt).args[k].value, t, A.FRESH)  # type: ignore[arg-type]
                                    for arm in arms for k in differing))
            modules = E.Modules(source.enclosing(func, (cst.ClassDef,)))  # type: ignore[arg-type]
            written, why = E.call_writes(call, t, modules, A.FRESH | frozenset(A.ALIAS_METHODS))
            if chosen and why:
                raise _Declined(f"{why}; after the rewrite it would get a new tensor instead of `{sorted(chosen)[0]}`")
            outside = L.outside_roots(source, func, node, [_call_of(arm.call_stmt).args[k].value  # type: ignore[arg-type]
                                                         for arm in arms for k in differing], t)
            if outside and not _consumes_only(call, t):
                raise _Declined(f"`{A.code(call.func)}(...)` may keep or return its argument (a container's `append`, "
                                f"`tuple(x)`'s views), and on one path that argument may be `{sorted(outside)[0]}`'s own "
                                "object; after the rewrite it would get a new tensor, so the caller's later in-place "
                                "updates (or identity checks) would no longer reach what it kept")
            target = [stmt.targets[0].target.value] if isinstance(stmt, cst.Assign) else []  # type: ignore[union-attr]
            hazard = L.alias_hazard(source, func, node, chosen | set(target), t) if chosen else None
            if hazard:
                raise _Declined(f"{hazard}; the selected argument is a new tensor after the rewrite")
            new_args = list(call.args)
            for k in differing:
                values = [_call_of(arm.call_stmt).args[k].value for arm in arms]  # type: ignore[arg-type]
                safety = self._check_values(values, f"argument {k + 1} of `{A.code(call.func)}`", t, notes, safety)
                where = _nested_where(self._select_fn(torch_name), cond_refs, [A.code(v) for v in values])
                new_args[k] = new_args[k].with_changes(value=cst.parse_expression(where))
            new_call = call.with_changes(args=new_args)
            if isinstance(stmt, cst.Expr):
                lines.append(A.code(new_call))
            elif isinstance(stmt, cst.Return):
                lines.append("return " + A.code(new_call))
            else:
                lines.append(f"{stmt.targets[0].target.value} = {A.code(new_call)}")  # type: ignore[union-attr]

        if identity:
            raise _Declined(identity)
        why = guard_reads(attr_reads, [g for g in guard if g not in evaluated])
        if why:
            raise _Declined(why)
        why = self._later_use(source, func, node, call_shape if shape == "call" else None, arms, final is None, test_names, t)
        if why:
            raise _Declined(why)
        why = M.lost_effects(source, node, [node.body] + ([node.orelse] if node.orelse is not None else []))
        if why:
            raise _Declined(why)

        # 5. the replacement, with a static conjunct kept as a Python `if`; with operands to check,
        # `if <static> and _graphmend_strided(...): <select>` and the original `if` as its `elif`
        changes: dict = {}
        if guard:
            body = "".join(f"    {line}\n" for line in lines)
            test = " and ".join([*(A.code(s) for s in static), G.call(guard)])
            head = cst.parse_module(f"if {test}:\n{body}").body[0]
            assert isinstance(head, cst.If)
            new_stmts = [head.with_changes(leading_lines=node.leading_lines,
                                           orelse=node.with_changes(leading_lines=()))]
            following_return = None  # kept: it still serves the original `if`
            text = ""
        elif static:
            body = "".join(f"    {line}\n" for line in lines)
            text = f"if {' and '.join(A.code(s) for s in static)}:\n{body}"
            if final is not None:
                text += "else:\n" + "".join(f"    {A.code(s)}\n" for s in final)
        else:
            text = "".join(line + "\n" for line in lines)
        try:
            new_stmts = new_stmts if guard else list(cst.parse_module(text).body)
        except cst.ParserSyntaxError as exc:  # pragma: no cover - a bug in this rule
            raise RuntimeError(f"generated code does not parse: {exc.message}\n{text}") from None
        changes[node] = cst.FlattenSentinel(new_stmts)
        if following_return is not None and not static:
            # With a kept static `if`, the following return still serves the path where the
            # static part is false.
            changes[following_return] = cst.RemoveFromParent()
        tree = source.replace_many(source.module, changes)
        if self._needs_helper:
            tree = source.with_helper(tree, SELECT_HELPER, _helper_code(torch_name))
        if not all(p.zero_d for p in conds):
            tree = source.with_helper(tree, A.TRUTH_HELPER, A.truth_code(torch_name))
        if guard:
            tree = source.with_helper(tree, G.HELPER, G.helper_code(torch_name))
            notes.append(f"the select runs when every tensor among `{', '.join(guard)}` is an ordinary strided one "
                         f"(`{G.HELPER}`, static under Dynamo); a sparse, mkldnn, nested, quantized or meta tensor "
                         "runs the original `if`, kept as its `elif`")
        if source.torch_name() is None:
            tree = source.with_import(tree)
        if not ctx.verified:
            notes.append("unverified: found by reading the source; assumes both branches give the same shape and dtype")
        else:
            notes.append("assumes both branches give the same shape and dtype; re-detection and `graphmend verify` check it")
        what = {"assign": "select the assigned values", "return": "select the returned value", "call": "select the call's arguments"}[shape]
        return source.fix_from(
            tree,
            rule=self.code,
            title=f"Replace the tensor-dependent `if` with torch.where ({what})",
            safety=safety,
            site=node,
            notes="; ".join(dict.fromkeys(notes)),
        )

    def begin_site(self, source: SourceFile, func: cst.FunctionDef, node: cst.CSTNode,
                   dtypes: Optional[dict[str, str]] = None, *, untyped: bool = False,
                   facts: Optional[dict[str, str]] = None) -> None:
        """The per-site state :meth:`_check_values` and :meth:`_select_fn` read, all of it in one
        place (GM402 borrows the checks for a single expression, which hoists no setups)."""
        self._no_grad = grad_disabled(source, node)
        self._reads = R.Reads(source, func, A.torch_names_of(source.module).torch_names
                              | A.torch_names_of(source.module).f_names)
        self._buffers = buffer_attrs(source, func)
        self._dtypes = dtypes or {}
        # what the first condition proves about dtypes: it runs before the selected values, not
        # before the setups hoisted above the select (A.dtype_facts)
        self._value_dtypes = facts if facts is not None else self._dtypes
        self._scalars: frozenset[str] = frozenset()
        self._setup_values: dict[str, cst.BaseExpression] = {}
        self._needs_helper = False
        self._proven_last = True
        self._untyped = untyped  # a condition that may not be a tensor: always the checked select helper

    def _check_values(self, values: list, what: str, t: A._Torch, notes: list[str], safety: Safety) -> Safety:
        """Every selected value: not None, not a Python number, no effects, no evident mismatch."""
        for v in values:
            if isinstance(v, cst.Name) and v.value == "None":
                raise _Declined(f"{what} is None in one branch: torch.where cannot select None")
            if _is_python_literal(v):
                raise _Declined(
                    f"{what} is the Python value `{A.code(v)}` in one branch; torch.where would turn it into a tensor"
                )
            eff = A.effects(v, t, self._reads.why, self._scalars)
            if not eff.ok:
                raise _Declined(f"{what}: {eff.problems[0]}, and both branches are evaluated after the rewrite")
            if eff.nan_prone:
                # harmless where no gradient reaches the value (no_grad, or only buffers and constants)
                if not self._no_grad and _resolved_sources(v, t, self._scalars | self._buffers, self._setup_values) != frozenset():
                    raise _Declined(_nan_reason(eff.nan_prone[0]))
                notes.append(f"`{eff.nan_prone[0]}` may be inf/NaN where its branch is not taken; no gradient "
                             "flows here (no_grad/inference_mode, or only buffers and constants feed it), and torch.where "
                             "selects the other value")
            fallible = A.shape_fallible(v, t, self._scalars, self._value_dtypes)
            if fallible:
                safety = Safety.UNSAFE
                notes.append(
                    f"`{fallible}` now runs on both paths; the original evaluated it only where its branch "
                    "was taken, and it may raise for some shapes or dtypes (operands that do not broadcast, `-` on a bool tensor)"
                )
        if not self._no_grad:
            why = _grad_mismatch(values, t, self._scalars | self._buffers, self._setup_values)
            if why:
                raise _Declined(why)
        dtypes = {d for d in (_explicit_dtype(v, t) for v in values) if d is not None}
        if len(dtypes) > 1:
            raise _Declined(f"{what} has dtype {' in one branch and '.join(sorted(dtypes))} in the other; torch.where would promote")
        ranks = [_rank_change(v) for v in values]
        if len(set(ranks)) > 1:
            raise _Declined(f"{what} has a different shape in each branch ({', '.join(A.code(v) for v in values)}); torch.where would broadcast")
        # torch.where broadcasts a [3] value against a [1, 3] one and promotes float16 against
        # bfloat16: the fix is safe only when every selected value provably has the shape and
        # dtype of one tensor.
        metas = [A.meta(v, t, self._scalars) for v in values]
        bases = {m.base for m in metas if m is not None}
        proven = all(m is not None for m in metas) and len(bases) == 1 and all(
            A.requirement_met(m.requires, self._value_dtypes.get(m.base)) for m in metas  # type: ignore[union-attr]
        )
        self._proven_last = proven
        if not proven:
            notes.append(
                f"cannot show from the source that {what} has the same shape and dtype in every branch; "
                f"{SELECT_HELPER} uses torch.where only when they agree (a static check under Dynamo) and "
                "otherwise picks the branch as the `if` did"
            )
        return safety

    def _later_use(self, source: SourceFile, func: cst.FunctionDef, node: cst.If, call_shape, arms: list[_Arm],
                   implicit: bool, test_names: set[str], t: A._Torch) -> Optional[str]:
        """What the code after the site does with what the site made or read (:mod:`_later`)."""
        reads = set(test_names)
        bound = {_assigned_name(s) for arm in arms for s in arm.setups}
        selected: dict[str, list] = {}
        kept: set[str] = set()  # names of containers that hold the select
        call, call_values, returned = None, None, None
        for arm in arms:
            for value in [*(s.value for s in arm.setups), *(v for _, v, _ in arm.targets), arm.ret]:  # type: ignore[attr-defined]
                if value is not None:
                    reads |= A.names_in(value)
        if call_shape is None and arms[0].ret is None:
            for name in _target_order(arms):
                values = [v for arm in arms for n, v, _ in arm.targets if n == name]
                if implicit or any(all(n != name for n, _, _ in arm.targets) for arm in arms):
                    values.append(cst.Name(name))
                selected[name] = values
            bound |= set(selected)
        elif call_shape is None:
            returned = [arm.ret for arm in arms]
        else:
            stmt, differing = call_shape
            call = _call_of(stmt)
            call_values = [_call_of(arm.call_stmt).args[k].value for arm in arms for k in differing]  # type: ignore[arg-type]
            reads |= set().union(*(A.names_in(v) for v in call_values))
            if isinstance(stmt, cst.Assign):
                target = stmt.targets[0].target.value  # type: ignore[union-attr]
                selected[target], bound = call_values, bound | {target}
            kind, name = t.func(call.func)
            if kind == "method" and name in E.KEEPING_METHODS and isinstance(call.func, cst.Attribute):
                kept = E.roots(call.func.value)  # `outs.append(...)`: the list holds the select after the site
                selected.update((n, call_values) for n in kept)
        return L.later_use(func, node, source.positions, t, E.Modules(source.enclosing(func, (cst.ClassDef,))),  # type: ignore[arg-type]
                           grad=not grad_disabled(source, node), reads=reads, bound=bound, selected=selected,
                           known_fresh=A.FRESH, call=call, call_values=call_values,
                           returned=returned, bare=set(selected) - kept, contained=frozenset(kept))

    def _select_fn(self, torch_name: str) -> str:
        """``torch.where`` for values proven alike; else the checked helper (added to the module)."""
        if self._proven_last and not self._untyped:
            return f"{torch_name}.where"
        self._needs_helper = True
        return SELECT_HELPER


# ------------------------------------------------------------------------------------------
# helpers


def _single_assignments(setups: list) -> dict[str, cst.BaseExpression]:
    """``name -> value`` for the hoisted setups that bind a name exactly once (``y = h.abs()``);
    a name bound twice or by an augmented assignment is left out (it stays opaque)."""
    seen: dict[str, int] = {}
    values: dict[str, cst.BaseExpression] = {}
    for s in setups:
        name = _assigned_name(s)
        seen[name] = seen.get(name, 0) + 1
        if isinstance(s, (cst.Assign, cst.AnnAssign)) and s.value is not None:
            values[name] = s.value
        else:
            seen[name] += 1
    return {n: v for n, v in values.items() if seen[n] == 1}


def _resolved_sources(value: cst.CSTNode, t: A._Torch, scalars: frozenset[str],
                      setups: dict[str, cst.BaseExpression], depth: int = 8) -> Optional[frozenset[str]]:
    """:func:`_effects.grad_sources`, with each name a hoisted setup binds replaced by the sources
    of the value it is bound to (``y - 1`` after ``y = h.abs()`` draws from ``h``). Both paths run
    the setups after the rewrite, so the substitution holds on either."""
    sources = E.grad_sources(value, t, scalars)
    if sources is None or depth == 0:
        return sources
    out: set[str] = set()
    for name in sources:
        if name in setups:
            inner = _resolved_sources(setups[name], t, scalars, setups, depth - 1)
            if inner is None:
                return None
            out |= inner
        else:
            out.add(name)
    return frozenset(out)


def _grad_mismatch(values: list, t: A._Torch, scalars: frozenset[str],
                   setups: Optional[dict[str, cst.BaseExpression]] = None) -> Optional[str]:
    """Why the values may differ for autograd, or None when every one draws gradients from the
    same tensors (``x.clamp(max=1.0)`` and ``x * 2``)."""
    sources = [_resolved_sources(v, t, scalars, setups or {}) for v in values]
    if all(s is not None for s in sources) and len(set(sources)) == 1:
        return None
    shown = ", ".join(f"`{A.code(v)}` from {_sources_text(s)}" for v, s in zip(values, sources))
    return ("the branches' values may not both require grad, or not from the same tensors (" + shown + "); "
            "torch.where's result requires grad when either value does, and the tensors of the branch not taken "
            "get a zero gradient instead of None (an optimizer then still updates them), unless no gradient flows "
            "(torch.no_grad()/inference_mode())")


def _sources_text(s: Optional[frozenset[str]]) -> str:
    if s is None:
        return "tensors this rule cannot tell"
    return ", ".join(f"`{n}`" for n in sorted(s)) if s else "no tensor"


def _nan_reason(expr: str) -> str:
    return (f"`{expr}` may be inf/NaN where its branch is not taken; torch.where evaluates both arms and "
            "back-propagates 0 * inf = NaN through the unselected one, and gradients may flow here (no "
            "enclosing torch.no_grad()/inference_mode())")


def guard_reads(reads: R.Reads, operands: list[str]) -> Optional[str]:
    """Why reading one of the layout guard's operands (each read once more, before the select)
    may raise or run code, or None."""
    for text in operands:
        why = reads.check(cst.parse_expression(text))
        if why:
            return f"the layout guard {why}; the guard reads it on every call, before the select"
    return None


def buffer_attrs(source: SourceFile, func: cst.FunctionDef) -> frozenset[str]:
    """``self.<name>`` for the buffers the enclosing class registers that never require grad
    (:func:`_effects.buffers`)."""
    cls = source.enclosing(func, (cst.ClassDef,))
    return frozenset(f"self.{n}" for n in E.buffers(cls, source.module)) if cls is not None else frozenset()  # type: ignore[arg-type]


def grad_disabled(source: SourceFile, node: cst.CSTNode) -> bool:
    """Whether ``node`` provably runs with autograd off: the innermost grad-mode switch around
    it (a ``with`` item, else the function's decorators) is ``torch.no_grad()``,
    ``torch.inference_mode()`` or ``torch.set_grad_enabled(False)``. ``enable_grad()``,
    ``inference_mode(False)`` or a switch whose argument is not a literal turn that proof off."""
    cur = source.parent(node)
    while cur is not None:
        if isinstance(cur, (cst.Lambda, cst.GeneratorExp)):
            return False  # it runs when called or consumed, maybe after the `with` has ended
        if isinstance(cur, cst.With):
            modes = [m for m in (_grad_mode(i.item) for i in cur.items) if m is not None]
            if modes:
                return modes[-1]
        if isinstance(cur, cst.FunctionDef):
            modes = [m for m in (_grad_mode(d.decorator) for d in cur.decorators) if m is not None]
            return bool(modes) and modes[-1]  # the last decorator wraps the function itself: it decides
        cur = source.parent(cur)
    return False


def _grad_mode(expr: cst.BaseExpression) -> Optional[bool]:
    """True: ``expr`` turns autograd off; False: it turns it on, or may; None: not a grad-mode switch."""
    call = expr if isinstance(expr, cst.Call) else None
    name = A.dotted(call.func if call is not None else expr).split(".")[-1]
    if name not in ("no_grad", "enable_grad", "inference_mode", "set_grad_enabled"):
        return None
    if name == "no_grad":
        return True
    if name == "enable_grad":
        return False
    args = list(call.args) if call is not None else []
    if not args:
        return name == "inference_mode"  # set_grad_enabled needs its argument
    value = args[0].value
    if not isinstance(value, cst.Name) or value.value not in ("True", "False"):
        return False
    return (value.value == "True") == (name == "inference_mode")


def site_dtypes(source: SourceFile, func: cst.FunctionDef, node: cst.CSTNode, t: A._Torch,
                reads: R.Reads) -> dict[str, str]:
    """What the assignments reaching the site show of the dtype classes of the names it reads
    (:func:`_analysis.reaching_dtypes`; a submodule's output through ``reads``), the ``return``
    that follows an ``if`` included."""
    following = _next_return(node, source) if isinstance(node, cst.If) else None
    names = A.names_in(node) | (A.names_in(following) if following is not None else set())
    return A.reaching_dtypes(func, node, names, source.parent, t, reads.output_classes)


def _known_dtypes(static: list[cst.BaseExpression], t: A._Torch) -> dict[str, str]:
    known: dict[str, str] = {}
    for part in static:
        if isinstance(part, cst.Comparison) and len(part.comparisons) == 1 and isinstance(part.comparisons[0].operator, (cst.Equal, cst.Is)):
            left, right = part.left, part.comparisons[0].comparator
            if isinstance(left, cst.Attribute) and left.attr.value == "dtype" and isinstance(left.value, cst.Name):
                d = A.dotted(right).split(".")
                if len(d) == 2 and d[0] in t.torch_names and d[1] in A.DTYPE_NAMES:
                    known[left.value.value] = d[1]
        if isinstance(part, cst.Call) and isinstance(part.func, cst.Attribute) and part.func.attr.value == "is_floating_point":
            if isinstance(part.func.value, cst.Name):
                known[part.func.value.value] = "floating"
    return known


def _looks_tensorish(test: cst.BaseExpression, t: A._Torch) -> bool:
    for node in A._iter(test):
        if isinstance(node, cst.Call):
            kind, name = t.func(node.func)
            if kind == "torch" or (kind == "method" and (name in A.BOOL_REDUCTIONS or name in A.WHOLE_REDUCTIONS or name in ("item", "tolist", "isinf", "isnan"))):
                return True
    return False


def _and_of(parts: list[cst.BaseExpression]) -> cst.BaseExpression:
    out = parts[0]
    for p in parts[1:]:
        out = cst.BooleanOperation(left=out, operator=cst.And(), right=p)
    return out


def _paren(text: str) -> str:
    return f"({text})" if any(op in text for op in (" ", "|", "&")) else text


def _arm_statements(suite: cst.BaseSuite) -> list[cst.BaseSmallStatement]:
    if isinstance(suite, cst.SimpleStatementSuite):
        return [s for s in suite.body if not isinstance(s, cst.Pass)]
    out: list[cst.BaseSmallStatement] = []
    for stmt in suite.body:  # type: ignore[attr-defined]
        if isinstance(stmt, cst.SimpleStatementLine):
            out.extend(s for s in stmt.body if not isinstance(s, cst.Pass))
        else:
            kind = {"FunctionDef": "def", "ClassDef": "class"}.get(type(stmt).__name__, type(stmt).__name__.lower())
            raise _Declined(f"a branch contains a compound statement (`{kind}`); only simple statements can be selected")
    return out


def _refuse_control_flow(stmts: list[cst.BaseSmallStatement], *, allow_final_return: bool) -> None:
    for i, s in enumerate(stmts):
        if isinstance(s, (cst.Break, cst.Continue)):
            word = "break" if isinstance(s, cst.Break) else "continue"
            raise _Declined(f"`{word}` inside the branch transfers control; torch.where cannot select control flow")
        if isinstance(s, cst.Raise):
            raise _Declined("`raise` inside the branch (a validation guard: see the trap-lowering rules)")
        if isinstance(s, cst.Return) and not (allow_final_return and i == len(stmts) - 1):
            raise _Declined("`return` before the end of the branch")
        if isinstance(s, cst.Expr) and isinstance(s.value, (cst.Yield, cst.Await)):
            raise _Declined("`yield`/`await` inside the branch suspends the function")
        if isinstance(s, (cst.Global, cst.Nonlocal)):
            raise _Declined("`global`/`nonlocal` inside the branch")
        if isinstance(s, cst.Assert):
            raise _Declined("`assert` inside the branch may raise where the branch was not taken")
        if isinstance(s, (cst.Import, cst.ImportFrom)):
            raise _Declined("an import inside the branch")
        if isinstance(s, cst.Del):
            raise _Declined("`del` inside the branch")


def _next_return(node: cst.If, source: SourceFile) -> Optional[cst.SimpleStatementLine]:
    parent = source.parent(node)
    body = getattr(parent, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    items = list(body)
    for i, stmt in enumerate(items):
        if stmt is node and i + 1 < len(items):
            nxt = items[i + 1]
            if isinstance(nxt, cst.SimpleStatementLine) and len(nxt.body) == 1 and isinstance(nxt.body[0], cst.Return):
                return nxt
    return None


def _call_of(stmt: cst.BaseSmallStatement) -> cst.Call:
    value = stmt.value  # type: ignore[attr-defined]
    assert isinstance(value, cst.Call)
    return value


def _call_shape(arms: list[list[cst.BaseSmallStatement]], has_else: bool):
    """(first statement, differing positional indexes) when every arm is the same call."""
    if not has_else or any(len(a) != 1 for a in arms):
        return None
    stmts = [a[0] for a in arms]
    kinds = {type(s) for s in stmts}
    if len(kinds) != 1 or kinds.pop() not in (cst.Expr, cst.Assign, cst.Return):
        return None
    if not all(isinstance(getattr(s, "value", None), cst.Call) for s in stmts):
        return None
    if isinstance(stmts[0], cst.Assign):
        targets = {tuple(A.code(t.target) for t in s.targets) for s in stmts}  # type: ignore[attr-defined]
        if len(targets) != 1 or len(stmts[0].targets) != 1 or not isinstance(stmts[0].targets[0].target, cst.Name):
            return None
    calls = [_call_of(s) for s in stmts]
    if len({A.code(c.func) for c in calls}) != 1:
        return None
    if len({len(c.args) for c in calls}) != 1:
        return None
    differing = []
    for k, arg in enumerate(calls[0].args):
        others = [c.args[k] for c in calls]
        if any((o.keyword.value if o.keyword else None) != (arg.keyword.value if arg.keyword else None) or o.star != arg.star for o in others):
            return None
        if len({A.code(o.value) for o in others}) > 1:
            if arg.keyword is not None or arg.star:
                return None  # differing keyword arguments: not this shape
            differing.append(k)
    if not differing:
        return None
    return stmts[0], differing


def _consumes_only(call: cst.Call, t: A._Torch) -> bool:
    """Whether ``call`` provably neither keeps nor returns its arguments' objects: ``print``, or a
    torch function whose result is a new tensor (not a view or a no-op conversion)."""
    kind, name = t.func(call.func)
    return (kind == "other" and name == "print") or (kind in ("torch", "F") and name in A.FRESH)


def _assigned_name(s: cst.BaseSmallStatement) -> str:
    if isinstance(s, cst.Assign):
        return s.targets[0].target.value  # type: ignore[union-attr]
    return s.target.value  # type: ignore[attr-defined]


def _split_arm(stmts: list[cst.BaseSmallStatement], names_outside: set[str], test_names: set[str], shape: str) -> _Arm:
    arm = _Arm(setups=[], targets=[])
    body = list(stmts)
    if shape == "return":
        arm.ret = body.pop().value  # type: ignore[attr-defined]
    elif shape == "call":
        arm.call_stmt = body.pop()
    seen_target = False
    read_so_far: set[str] = set()
    for s in body:
        if isinstance(s, cst.AugAssign):
            raise _Declined(f"`{A.code(s)}` may update a tensor in place in the branch")
        if isinstance(s, cst.Expr):
            raise _Declined(f"the branch calls `{A.code(s.value)}` for its effect, which would run on both paths")
        if isinstance(s, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in s.targets] if isinstance(s, cst.Assign) else [s.target]
            if isinstance(s, cst.AnnAssign) and s.value is None:
                continue
            if len(targets) != 1:
                raise _Declined(f"`{A.code(s)}` assigns several targets at once")
            target = targets[0]
            if isinstance(target, cst.Attribute):
                raise _Declined(
                    f"the branch writes the attribute `{A.code(target)}` (module state); rebinding it to a select would "
                    "write on both paths"
                )
            if isinstance(target, cst.Subscript):
                raise _Declined(f"the branch writes into `{A.code(target)}` in place")
            if not isinstance(target, cst.Name):
                raise _Declined(f"`{A.code(s)}` unpacks into several names")
            name = target.value
            value = s.value
            assert value is not None
            ann = s.annotation if isinstance(s, cst.AnnAssign) else None
            # With the return/call shapes nothing after the branch reads its names on this
            # path, so every assignment is a setup; otherwise a name read outside the `if`
            # is a selected value.
            if shape == "assign" and name in names_outside:
                if any(n == name for n, _, _ in arm.targets):
                    raise _Declined(f"the branch assigns `{name}` twice")
                arm.targets.append((name, value, ann))
                seen_target = True
                read_so_far |= A.names_in(value)
                continue
            # a setup statement: a name used only inside this `if`
            if seen_target:
                raise _Declined(f"the setup statement `{A.code(s)}` follows a selected assignment; it cannot be hoisted")
            if name in test_names or name in read_so_far or name in A.names_in(value):
                raise _Declined(f"`{name}` is read before it is assigned in the branch; hoisting would change it")
            arm.setups.append(s)
            read_so_far |= A.names_in(value)
            continue
        raise _Declined(f"`{A.code(s)}` in the branch is not an assignment")
    return arm


def _target_order(arms: list[_Arm]) -> list[str]:
    seqs = [[n for n, _, _ in arm.targets] for arm in arms if arm.targets]
    if not seqs:
        return []
    longest = max(seqs, key=len)
    for seq in seqs:
        it = iter(longest)
        if not all(any(n == m for m in it) for n in seq):
            raise _Declined(f"the branches assign {', '.join(seq)} and {', '.join(longest)} in a different order")
    return list(longest)


def _value_names(arms: list[_Arm], t: A._Torch) -> set[str]:
    """Names whose tensors a selected value may be (``x``, ``x.float()``, ``x.view(...)``)."""
    out: set[str] = set()
    for arm in arms:
        for _, v, _ in arm.targets:
            out |= E.alias_roots(v, t, A.FRESH)
    return out


def _identity_escape(source: SourceFile, func: cst.FunctionDef, node: cst.CSTNode, arms: list[_Arm],
                     implicit: bool, t: A._Torch) -> Optional[str]:
    """Why a caller could see that a selected name no longer is the tensor it was, or None.

    On a path where the original keeps an existing tensor (``y = x``, no ``else``, a view or a
    no-op conversion of one) that is not provably made in this function, the caller may get that
    very tensor back (and share it with its own argument); after the rewrite it gets a new one."""
    for name in _target_order(arms):
        values = [v for arm in arms for n, v, _ in arm.targets if n == name]
        if implicit or any(all(n != name for n, _, _ in arm.targets) for arm in arms):
            values.append(cst.Name(name))
        outside = L.outside_roots(source, func, node, values, t)
        if outside:
            escape = E.escapes_after(func, node, source.positions, {name}, t, A.FRESH)
            if escape:
                return (f"on one path `{name}` keeps `{sorted(outside)[0]}`, a tensor not made in this function, and "
                        f"{escape}; after the rewrite it is a new tensor there, which a caller that updates either "
                        "one in place (or compares identity) would see")
    return None


def _names_outside(func: cst.FunctionDef, node: cst.If, following_return: Optional[cst.CSTNode]) -> set[str]:
    skip = (node, following_return)
    return A.names_in(func.params, skip) | A.names_in(func.body, skip)


def _bound_before(name: str, node: cst.CSTNode, func: cst.FunctionDef, source: SourceFile) -> bool:
    """``name`` is certainly bound when ``node`` runs: a parameter, or assigned by a statement
    that runs before it on every path (a preceding sibling in an enclosing block)."""
    params = func.params
    all_params = list(params.params) + list(params.posonly_params) + list(params.kwonly_params)
    for extra in (params.star_arg, params.star_kwarg):
        if isinstance(extra, cst.Param):
            all_params.append(extra)
    if any(p.name.value == name for p in all_params):
        return True
    child: cst.CSTNode = node
    parent = source.parent(child)
    while parent is not None and parent is not func:
        if isinstance(parent, cst.For) and child is parent.body and name in _target_names(parent.target):
            return True  # inside the loop body, the loop variable is bound
        body = getattr(parent, "body", None)
        if isinstance(body, (list, tuple)):
            for stmt in body:
                if stmt is child:
                    break
                if _binds(stmt, name):
                    return True
        child, parent = parent, source.parent(parent)
    if parent is func and isinstance(func.body, cst.IndentedBlock):
        for stmt in func.body.body:
            if stmt is child:
                break
            if _binds(stmt, name):
                return True
    return False


def _param_names(func: cst.FunctionDef) -> set[str]:
    params = func.params
    every = [*params.params, *params.posonly_params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def _assigned_in(func: cst.FunctionDef) -> set[str]:
    """Local names of the function: assigned somewhere in it (not only parameters)."""
    out: set[str] = set()
    for n in A._iter(func.body):
        if isinstance(n, cst.AssignTarget):
            out |= _target_names(n.target)
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
            out |= _target_names(n.target)
        elif isinstance(n, (cst.For, cst.CompFor)):
            out |= _target_names(n.target)
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            out |= _target_names(n.asname.name)
        elif isinstance(n, cst.NamedExpr):
            out |= _target_names(n.target)
    return out


def _declared_global(func: cst.FunctionDef) -> set[str]:
    out: set[str] = set()
    for n in A._iter(func.body):
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            out |= {item.name.value for item in n.names}
    return out


def _binds(stmt: cst.CSTNode, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for s in stmt.body:
        if isinstance(s, cst.Assign):
            for t in s.targets:
                if name in _target_names(t.target):
                    return True
        elif isinstance(s, (cst.AnnAssign, cst.AugAssign)) and isinstance(s.target, cst.Name) and s.target.value == name:
            return s.value is not None if isinstance(s, cst.AnnAssign) else True
    return False


def _target_names(t: cst.CSTNode) -> set[str]:
    if isinstance(t, cst.Name):
        return {t.value}
    if isinstance(t, (cst.Tuple, cst.List)):
        out: set[str] = set()
        for el in t.elements:
            out |= _target_names(el.value)
        return out
    return set()


def _fresh_names(func: cst.FunctionDef, n: int) -> list[str]:
    used = A.names_in(func)
    out = []
    k = 0
    while len(out) < n:
        name = "_gm_cond" if k == 0 else f"_gm_cond{k}"
        if name not in used:
            out.append(name)
        k += 1
    return out


def _nested_where(function: str, conds: list[str], values: list[str]) -> str:
    """where(c1, v1, where(c2, v2, v3)); ``values`` has one more item than ``conds``."""
    assert len(values) == len(conds) + 1
    expr = values[-1]
    for cond, value in zip(reversed(conds), reversed(values[:-1])):
        expr = f"{function}({cond}, {value}, {expr})"
    return expr


@dataclass(frozen=True)
class _Indent:
    column: int  # where the statement will start in the file
    text: str  # its indentation in the generated text


def _fit(prefix: str, expr: str, indent: _Indent) -> str:
    """One line when it fits; else the outer where's arguments one per line."""
    line = prefix + expr
    if indent.column + len(line) <= LINE_LIMIT or "\n" in expr:
        return line
    try:
        call = cst.parse_expression(expr)
    except cst.ParserSyntaxError:
        return line
    if not isinstance(call, cst.Call):
        return line
    inner = indent.text + "    "
    args = ",\n".join(inner + A.code(a.value) if a.keyword is None else inner + A.code(a) for a in call.args)
    return f"{prefix}{A.code(call.func)}(\n{args},\n{indent.text})"


def _is_python_literal(v: cst.CSTNode) -> bool:
    if isinstance(v, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    if isinstance(v, cst.Name) and v.value in ("True", "False"):
        return True
    if isinstance(v, cst.UnaryOperation):
        return _is_python_literal(v.expression)
    return False


_CAST_METHODS = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16",
                 "int": "int32", "long": "int64", "bool": "bool", "short": "int16"}


def _explicit_dtype(v: cst.CSTNode, t: A._Torch) -> Optional[str]:
    if isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute):
        name = v.func.attr.value
        if name in _CAST_METHODS and not v.args:
            return _CAST_METHODS[name]
        if name == "to":
            for a in v.args:
                d = A.dotted(a.value).split(".")
                if len(d) == 2 and d[0] in t.torch_names and d[1] in A.DTYPE_NAMES:
                    return {"half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32"}.get(d[1], d[1])
    return None


def _rank_change(v: cst.CSTNode) -> str:
    """A coarse shape signature: 0-d reductions and rank-changing calls differ from the rest."""
    if isinstance(v, cst.Call):
        kind = v.func.attr.value if isinstance(v.func, cst.Attribute) else A.dotted(v.func).split(".")[-1]
        if kind in A.WHOLE_REDUCTIONS | A.BOOL_REDUCTIONS and (not v.args or (not isinstance(v.func, cst.Attribute) and len(v.args) == 1)):
            return "0-d"
        if kind in ("unsqueeze",):
            return "unsqueeze"
        if kind in ("squeeze", "flatten"):
            return kind
    return "same"
