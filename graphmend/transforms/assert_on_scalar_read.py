"""GM303 assert-on-scalar-read: ``assert t.item() <= n`` checked in the graph, not in Python.

Real models validate their inputs with an ``assert`` on a number read from a tensor::

    assert lengths.max().item() <= slen          # transformers' XLM and FlauBERT, twice each

The ``.item()`` ends the graph (GB0124) for nothing but a check that almost never fails. The
rewrite keeps the assertion and its line, and changes only its test::

    assert _graphmend_trap(_graphmend_item_compare(lengths.max(), "<=", slen), AssertionError, '', False, entries=(__name__ + '.XLMModel',))

* ``_graphmend_item_compare`` (a helper appended to the module) is the original comparison in
  eager mode, exactly (``.item()`` and the Python operator). Under ``torch.compile`` it compares
  the one-element CPU tensor itself where that is provably the same comparison: the other operand
  is a Python ``int`` the tensor's dtype holds exactly (an integer dtype within its range; a float
  dtype within its contiguous integers, 2**24 for float32), or a Python ``float`` against a float64
  tensor. A float32 tensor against ``0.1`` is *not* the same (torch rounds ``0.1`` to float32,
  Python widens the tensor's value to a double), nor is an integer tensor against a float (torch
  computes it in float32): there, and on any other device, it returns the Python comparison and
  the break stays — the program is unchanged on every path.
* ``_graphmend_trap`` (the GM301 runtime) is the value itself in eager mode; under compile it is an
  in-graph ``torch._assert_async`` whose ``RuntimeError`` the boundary turns back into
  ``AssertionError(message)``. Left alone, Dynamo would lower an ``assert`` on a tensor to
  ``torch._assert_async`` too — but the caller would then see ``RuntimeError``.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Edit, Fix, Safety
from graphmend.transforms import _boundary as B
from graphmend.transforms import _trap as T
from graphmend.transforms.base import RuleContext, SourceFile, Transform, iter_nodes

HELPER = "_graphmend_item_compare"

# The Python comparisons a 0-d tensor computes exactly as Python does on the number it holds
# (when the other operand is exactly representable in its dtype: checked by the helper).
_COMPARE = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">=",
            cst.Equal: "==", cst.NotEqual: "!="}

HELPER_CODE = '''

def {helper}(left, op, right, item="left"):
    """``left.item() <op> right`` (``left <op> right.item()`` with item="right"), added by graphmend (GM303).

    In eager mode exactly that Python comparison. Under torch.compile, where the tensor is one CPU
    element and its dtype holds the other (Python) number exactly, the same comparison as a 0-d bool
    tensor, which stays in the graph; anywhere else the Python comparison, as before. The checks
    read dtypes, devices and the Python number, which torch.compile treats as constants (or guards).
    """
    tensor, other = (left, right) if item == "left" else (right, left)
    exact = False
    if {torch}.compiler.is_compiling() and isinstance(tensor, {torch}.Tensor) and not isinstance(other, bool) \\
            and tensor.numel() == 1 and tensor.device.type == "cpu":
        integral = isinstance(other, (int, {torch}.SymInt))
        if tensor.dtype in ({torch}.int64, {torch}.int32, {torch}.int16, {torch}.int8, {torch}.uint8):
            info = {torch}.iinfo(tensor.dtype)
            exact = integral and info.min <= other <= info.max
        elif tensor.dtype == {torch}.float64 and isinstance(other, float):
            exact = True
        else:
            # Integers a float dtype holds exactly: torch rounds the Python int to the tensor's dtype.
            limit = {{{torch}.float64: 2 ** 53, {torch}.float32: 2 ** 24,
                      {torch}.float16: 2 ** 11, {torch}.bfloat16: 2 ** 8}}.get(tensor.dtype)
            exact = limit is not None and integral and -limit <= other <= limit
    value = tensor.detach().reshape(()) if exact else tensor.item()
    a, b = (value, other) if item == "left" else (other, value)
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "==":
        return a == b
    return a != b
'''


class _Declined(Exception):
    """The first failed condition; becomes a Decline."""


def _item_receiver(node: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """``t`` for ``t.item()`` (no arguments), else None."""
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "item"
            and not node.args and not node.lpar):
        return node.func.value
    return None


def _has_item(node: cst.CSTNode) -> bool:
    return any(_item_receiver(c) is not None for c in iter_nodes(node, (cst.Call,)))


def _literal(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


class AssertOnScalarRead(Transform):
    code = "GM303"
    name = "assert-on-scalar-read"
    summary = "`assert t.item() <= n`: the comparison on the tensor, an in-graph assertion, AssertionError restored"
    safety = Safety.SAFE
    categories = (Category.SCALAR,)
    gb_types = ("Unsupported Tensor.item() call with capture_scalar_outputs=False",)

    docs = {
        "What it does": (
            "Finds an `assert` whose test compares a number read from a tensor with `.item()` to another "
            "value (`assert lengths.max().item() <= slen`, optionally with a string-literal message) and "
            "rewrites only the test: `_graphmend_item_compare(lengths.max(), \"<=\", slen)` is the same "
            "comparison on the tensor under `torch.compile` (where provably exact) and `_graphmend_trap` "
            "makes the check an in-graph `torch._assert_async` whose failure the boundary raises again as "
            "`AssertionError(message)`."
        ),
        "Why it breaks the graph": (
            "`.item()` hands Python a number read from a tensor; without "
            "`torch._dynamo.config.capture_scalar_outputs` Dynamo ends the graph there (GB0124), runs the "
            "read and the check eagerly with a device synchronisation, and starts a new graph after it. "
            "transformers' XLM and FlauBERT break twice each on `assert lengths.max().item() <= slen`."
        ),
        "Example": (
            "```python\n"
            "assert lengths.max().item() <= slen\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "assert _graphmend_trap(_graphmend_item_compare(lengths.max(), \"<=\", slen), AssertionError, '', False, entries=(__name__ + '.M',))\n"
            "```\n"
            "(with the graphmend runtime and the helper appended to the module). By hand, when the tensor "
            "is an integer tensor and the other side a Python int, `assert lengths.max() <= slen` stays in "
            "the graph too, but a failing check then raises `RuntimeError` under `torch.compile`."
        ),
        "Fix safety": (
            "Safe when the boundary is proven (the `assert` is inside a module class of this file that "
            "defines `forward`, or in a function compiled here): eager mode runs the original comparison "
            "and assertion; under compile the helper takes the tensor path only where the comparison is "
            "exact (an integer dtype and a Python int in its range; a float dtype and a Python int within "
            "its contiguous integers; float64 and a Python float; one CPU element) and otherwise the "
            "original `.item()` comparison, where the break stays. A failing check raises "
            "`AssertionError(message)` again at the boundary (the message is the literal; with none, `''`), "
            "after the compiled call instead of at the `assert` line. In a module-level helper (transformers' "
            "`get_masks`) the check names the module classes of this file that call it with nothing written "
            "before (`entries=(...)`): under any other compiled entry it runs as written. Unsafe without a "
            "proven boundary (a helper no module class of this file calls: the caller would see `RuntimeError`). "
            "Declined: a message that is not a string literal, chained comparisons, `is`/`in`, a test "
            "with more than one `.item()` or with `and`/`or`/`not`, a test spanning several lines, an "
            "`assert` inside a `try` with handlers (or in a class whose methods have one), state written "
            "that may run earlier in the same graph: in the function before the check, in the methods and "
            "helpers it calls first, in the callers before their call (a failing graph loses it; a call this "
            "analysis cannot resolve counts as a write; methods that never run on the way, such as "
            "`_init_weights`, do not; an attribute read counts too: a property getter of this file is "
            "followed, any other descriptor, an attribute named at run time, or `self.x` that a base class "
            "of another file may define as a property count as writes). While a module hook is registered "
            "on the entry's modules (or globally, by any file) the runtime keeps the check as written."
        ),
        "References": (
            "DESIGN.md, *Trap lowering*; GM301 (the same runtime); Dynamo graph-break registry GB0124; "
            "PyTorch type promotion: https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc"
        ),
    }

    VALID = (
        # A Python value compared: no tensor read, Dynamo resolves it while tracing.
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n        assert x.size(0) <= n\n        return x\n",
        # A dynamic message cannot be carried by the in-graph assertion.
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n"
        "        assert x.max().item() <= n, f'too long: {n}'\n        return x\n",
        # Two scalar reads in one test.
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, y):\n"
        "        assert x.max().item() <= y.max().item()\n        return x\n",
        # Chained comparison: bool() of a tensor in the middle.
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n        assert 0 <= x.max().item() <= n\n        return x\n",
        # Inside a try whose handler expects the AssertionError at this line.
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n        try:\n"
        "            assert x.max().item() <= n\n        except AssertionError:\n            x = x.clamp(max=n)\n        return x\n",
    )

    INVALID = (
        (
            "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        slen = x.size(1)\n        assert lengths.max().item() <= slen\n        return x * 2\n",
            "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        slen = x.size(1)\n"
            "        assert _graphmend_trap(_graphmend_item_compare(lengths.max(), \"<=\", slen), AssertionError, '', False, entries=(__name__ + '.M',))\n"
            "        return x * 2\n" + B.RUNTIME + HELPER_CODE.format(helper=HELPER, torch="torch"),
        ),
        (
            "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n"
            "        assert n > x.sum().item(), \"sum too large\"\n        return x\n",
            "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, n):\n"
            "        assert _graphmend_trap(_graphmend_item_compare(n, \">\", x.sum(), \"right\"), AssertionError, 'sum too large', False, entries=(__name__ + '.M',)), \"sum too large\"\n"
            "        return x\n" + B.RUNTIME + HELPER_CODE.format(helper=HELPER, torch="torch"),
        ),
    )

    # -- sites --------------------------------------------------------------------------------

    def prefilter(self, text: str) -> bool:
        return "assert" in text and ".item()" in text

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for node in iter_nodes(source.module, (cst.Assert,)):
            if _has_item(node.test) and B.enclosing_function(source, node) is not None:  # type: ignore[attr-defined]
                yield node

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        return range(source.line(node), source.end_line(node) + 1)

    # -- the proof ----------------------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.Assert)
        try:
            return self._rewrite(node, source, ctx)
        except _Declined as exc:
            return self.decline(source, node, str(exc))

    def _rewrite(self, node: cst.Assert, source: SourceFile, ctx: RuleContext) -> Fix:
        message = ""
        if node.msg is not None:
            literal = _literal(node.msg)
            if literal is None:
                raise _Declined("the message is not a string literal (a dynamic message cannot be carried by the in-graph assertion)")
            message = literal
        for name in (B.TRAP, HELPER, "AssertionError"):
            if B.module_binds(source, name) and not (name in (B.TRAP, HELPER) and _defined_by_graphmend(source, name)):
                raise _Declined(f"the module binds `{name}` itself")
        test = node.test
        if source.line(test) != source.end_line(test):
            raise _Declined("the test spans several lines; the rewrite keeps every line where it is")
        if not isinstance(test, cst.Comparison):
            raise _Declined(f"`{source.code(test)}` is not one comparison with the scalar read (only `<`, `<=`, `>`, "
                            "`>=`, `==`, `!=` have an exact tensor form)")
        if len(test.comparisons) != 1:
            raise _Declined(f"`{source.code(test)}` is a chained comparison (it takes the truth value of the middle operand)")
        target = test.comparisons[0]
        op = _COMPARE.get(type(target.operator))
        if op is None:
            raise _Declined(f"`{source.code(test)}` compares with `is`/`in`, which has no tensor form")
        left, right = test.left, target.comparator
        reads = [c for c in iter_nodes(test, (cst.Call,)) if _item_receiver(c) is not None]
        if len(reads) != 1:
            raise _Declined(f"the test reads {len(reads)} scalars with `.item()`; only one side may be a scalar read")
        side = "left" if left is reads[0] else "right" if right is reads[0] else None
        if side is None:
            raise _Declined(f"`{source.code(reads[0])}` is not a whole side of the comparison (Python arithmetic on the "
                            "number would round differently on a tensor)")
        if any(isinstance(n, cst.NamedExpr) for n in iter_nodes(test, (cst.NamedExpr,))):
            raise _Declined("the test assigns with `:=`")
        handler = B.inside_try(source, node)
        if handler is not None:
            raise _Declined(f"the assert is inside the `try` at line {source.line(handler)}, whose handlers would not see the "
                            "in-graph assertion's failure at this line")
        caller_try = T.try_in_callers(source, node)
        if caller_try is not None:
            raise _Declined(f"the `try` at line {source.line(caller_try)} may call this check; under compile the assertion fails "
                            "the whole graph, so its handler would not see AssertionError")
        written = T.state_written_before(source, node)
        if written:
            raise _Declined(written)
        tensor = _item_receiver(reads[0])
        assert tensor is not None
        if side == "left":
            inner = f'{HELPER}({source.code(tensor)}, "{op}", {source.code(right)})'
        else:
            inner = f'{HELPER}({source.code(left)}, "{op}", {source.code(tensor)}, "right")'
        new_test = f"{B.TRAP}({inner}, AssertionError, {message!r}, False{T.entries_argument(source, node)})"
        edit = _replace_text(source, test, new_test)
        runtime = B.runtime_edits(source, ctx)
        if isinstance(runtime, str):
            raise _Declined(runtime)
        edits = (edit,) + runtime[0] + _helper_edits(source)
        notes = ("Eager mode is unchanged. Under torch.compile on CPU, where the comparison on the tensor is exact, the "
                 f"check is torch._assert_async in the graph and AssertionError({message!r}) is raised again by the "
                 "boundary; elsewhere the Python comparison (and its break) stays.")
        return T.trap_fix(self.code, f"check `{source.code(test)}` on the tensor inside the graph (AssertionError restored after the call)",
                          source, node, ctx, edits, runtime[1], notes, "the Python comparison (and its graph break)")


def _replace_text(source: SourceFile, node: cst.CSTNode, text: str) -> Edit:
    """The edit replacing one single-line expression's text, nothing else on its line."""
    pos = source.positions[node]
    line = source.lines[pos.start.line - 1]
    new = line[: pos.start.column] + text + line[pos.end.column :]
    return Edit(source.path, pos.start.line, pos.start.line, new, line)


def _defined_by_graphmend(source: SourceFile, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in source.module.body)


def _helper_edits(source: SourceFile) -> tuple[Edit, ...]:
    """The edit appending the helper after the last line (none when the module has it): no line moves."""
    if _defined_by_graphmend(source, HELPER):
        return ()
    torch_name = source.torch_name() or "_graphmend_torch"
    n = len(source.lines)
    return (Edit(file=source.path, start_line=n + 1, end_line=n,
                 new_text=HELPER_CODE.format(helper=HELPER, torch=torch_name), old_text=""),)
