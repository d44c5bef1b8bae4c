"""GM401 scalar-item-in-tensor-arithmetic: ``x * t.item()`` keeps the scalar as a 0-d tensor.

``t.item()`` (and ``float(t)`` / ``int(t)``) hands Dynamo a Python number it cannot trace
without ``capture_scalar_outputs`` (GB0124): the graph ends there. When that number only meets
a tensor in one arithmetic operator, the same result can be computed from the 0-d tensor
itself, inside the graph. "The same" is the hard part, measured under torch 2.13 on CPU over
every pair of nine dtypes, seven operators and both operand orders:

* **dtype promotion.** A Python number is a *wrapped number*: it never widens a dimensioned
  tensor of the same category (``x_fp16 * 0.5`` is fp16) and takes the default dtype when it is
  of a higher category (``x_int * 0.5`` is float32). A 0-d tensor behaves the same only when
  ``torch.promote_types(x.dtype, t.dtype) == x.dtype`` and ``x`` has at least one dimension
  (two 0-d tensors promote fully: ``fp16_0d * fp32_0d`` is fp32). ``int(t)`` on a float tensor
  truncates; ``float(t)`` on an integer tensor changes the category; ``int(True)`` is 1, not a bool.
* **rounding.** ``s / x`` with a Python ``s`` is ``x.reciprocal() * s`` (``Tensor.__rtruediv__``),
  not a division: it differs in the last bit, so a scalar on the left of ``/`` is declined.
  ``**`` dispatches on the scalar's value (``x ** 2`` is ``square``), ``//`` and ``%`` differ on
  signs: declined. ``+ - *`` (either side), ``/`` (scalar on the right) and one comparison match.
* **CUDA.** A CPU 0-d tensor is a "CPU scalar" to TensorIterator, computed exactly like a Python
  number; a CUDA 0-d tensor is an ordinary operand: cast to the common dtype before the
  operation (a Python number is kept in the wider compute type) and divided directly (a Python
  divisor becomes a multiplication by its reciprocal). So on a device other than the CPU the
  tensor path is taken only when the dtypes are equal and the operator is not ``/``.
* **autograd.** ``.item()`` cuts the gradient; the 0-d tensor is ``detach()``-ed.

The dtypes and devices are not visible in the source, but they are *static* under Dynamo (it
guards on them), so the rewrite calls a small helper, added to the module, that checks them
when the call runs: on the proven path it returns the 0-d tensor (no break), otherwise exactly
the original conversion (the break stays, the program is unchanged). The rewrite is therefore
the same program on every path, including non-tensor values (``float(self.scale)``).
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Fix, Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms.base import RuleContext, SourceFile, Transform

HELPER = "_graphmend_scalar"
HOLD = "_graphmend_hold"

# The operators for which a 0-d tensor operand computes exactly what a Python number does
# (see the module docstring): (operator type, allowed with the scalar on the left).
_BINARY = {cst.Add: (True, "+"), cst.Subtract: (True, "-"), cst.Multiply: (True, "*"), cst.Divide: (False, "/")}
_COMPARE = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">=",
            cst.Equal: "==", cst.NotEqual: "!="}

HELPER_CODE = '''
def {helper}(value, other, op="*", kind="item"):
    """``value.item()`` (or ``float(value)`` / ``int(value)``) as it meets ``other`` in ``other <op> ...``.

    Added by graphmend (GM401). When the result is provably the same, this returns ``value`` as a
    0-d tensor, which torch.compile keeps in the graph; otherwise the Python number, exactly as
    before. The checks read only dtypes, devices and shapes, which torch.compile treats as
    constants, so they cost nothing in the compiled graph.
    """
    if kind == "held" and not isinstance(value, {torch}.Tensor):
        return value  # {hold}() already made it a Python number
    if (
        isinstance(value, {torch}.Tensor)
        and isinstance(other, {torch}.Tensor)
        and other.dim() > 0
        and value.numel() == 1
        and not value.is_complex()
        and {torch}.promote_types(other.dtype, value.dtype) == other.dtype
        and (kind in ("item", "held")
             or (kind == "float" and value.is_floating_point())
             or (kind == "int" and not value.is_floating_point() and value.dtype != {torch}.bool))
        and (value.device.type == "cpu" and (value.device == other.device or value.dim() == 0)
             or value.device == other.device and value.dtype == other.dtype and op != "/")
    ):
        # A Python number does not take part in autograd: neither does the 0-d tensor.
        return value.detach().reshape(())
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    return value.item()


def {hold}(value):
    """``value.item()``, kept as a private 0-d tensor when ``value`` is a one-element tensor (GM401)."""
    if isinstance(value, {torch}.Tensor) and value.numel() == 1:
        # A copy: an in-place update of ``value`` later must not change the number read here.
        return value.detach().reshape(()).clone()
    return value.item()
'''


class _Declined(Exception):
    """Stops the analysis at the first failed condition; becomes a Decline."""


def _scalar_kind(call: cst.Call) -> Optional[tuple[str, cst.BaseExpression]]:
    """('item' | 'float' | 'int', the converted expression) for a scalar read, else None."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "item" and not call.args:
        return "item", call.func.value
    if isinstance(call.func, cst.Name) and call.func.value in ("float", "int") and len(call.args) == 1:
        arg = call.args[0]
        if arg.keyword is None and not arg.star:
            return call.func.value, arg.value
    return None


def _is_plain_read(node: cst.CSTNode) -> bool:
    """A name or an attribute chain on a name: reading it twice is the same as reading it once."""
    if isinstance(node, cst.Name):
        return node.value not in ("True", "False", "None")
    if isinstance(node, cst.Attribute):
        return _is_plain_read(node.value)
    return False


class ScalarItemInTensorArithmetic(Transform):
    code = "GM401"
    name = "scalar-item-in-tensor-arithmetic"
    summary = "`.item()` / `float(t)` / `int(t)` used only as an operand of tensor arithmetic: keep it a 0-d tensor"
    safety = Safety.SAFE
    categories = (Category.SCALAR,)
    gb_types = ("Unsupported Tensor.item() call with capture_scalar_outputs=False",)

    docs = {
        "What it does": (
            "Finds a scalar read from a tensor (`t.item()`, `float(t)`, `int(t)`) whose value is only an "
            "operand of `+`, `-`, `*`, `/` or one comparison with a tensor, directly or through a local "
            "name assigned once (`scale = t.item()` ... `x * scale`), and makes it a 0-d tensor operand, "
            "so the arithmetic stays in the graph."
        ),
        "Why it breaks the graph": (
            "A Python number read from a tensor is data the graph cannot know in advance. Without "
            "`torch._dynamo.config.capture_scalar_outputs` Dynamo ends the graph at the read (GB0124, "
            "*Unsupported Tensor.item() call with capture_scalar_outputs=False*), runs it eagerly with a "
            "device synchronisation, and starts a new graph after it."
        ),
        "Example": (
            "```python\n"
            "scale = gate.sum().item()\n"
            "return hidden * scale\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "scale = _graphmend_hold(gate.sum())\n"
            "return hidden * _graphmend_scalar(scale, hidden, \"*\", \"held\")\n"
            "```\n"
            "The helper (added once to the module) returns the 0-d tensor where that is provably the same "
            "computation and the Python number otherwise; writing `hidden * gate.sum().detach()` by hand is "
            "the same when `hidden` is a dimensioned tensor whose dtype the scalar's does not widen."
        ),
        "Fix safety": (
            "Safe: the rewritten program computes the same values, dtypes and shapes on every path. A 0-d "
            "tensor differs from a Python number in promotion (`int_tensor * fp64_0d` is fp64, "
            "`int_tensor * 0.5` is float32; two 0-d tensors promote fully), in rounding (`s / x` with a "
            "Python `s` is `x.reciprocal() * s`; on CUDA a Python divisor is multiplied by its reciprocal and "
            "a Python number is kept in the wider compute type), and in autograd; the helper takes the tensor "
            "path only where none of these applies (the other operand is a dimensioned tensor, the scalar's "
            "dtype does not widen it, `int()`/`float()` keep the category, on CUDA equal dtypes and no `/`) and "
            "returns the original Python number otherwise, where the break stays. Declined: `**`, `//`, `%`, "
            "a scalar on the left of `/`, chained comparisons, Python arithmetic on the scalar before it meets "
            "a tensor (`t.item() * 2 * x`), an operand that is not a plain name or attribute, and any other "
            "use of the name (`range(n)`, an `if`, a call argument, a second assignment) — for those see GM501."
        ),
        "References": (
            "PyTorch type promotion: https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc ; "
            "Dynamo graph-break registry GB0124; `torch._dynamo.config.capture_scalar_outputs` (GM501)."
        ),
    }

    VALID = (
        # The scalar decides Python control flow: no tensor form.
        "import torch\n\ndef f(x, t):\n    for _ in range(t.item()):\n        x = x + 1\n    return x\n",
        # Python arithmetic on the scalar before it meets a tensor: rounding would change.
        "import torch\n\ndef f(x, t):\n    return t.item() * 2 * x\n",
        # A scalar on the left of `/` is `x.reciprocal() * s`, not a division.
        "import torch\n\ndef f(x, t):\n    return t.item() / x\n",
        # `**` picks a kernel by the scalar's value.
        "import torch\n\ndef f(x, t):\n    return x ** t.item()\n",
        # The name is used as a Python number elsewhere.
        "import torch\n\ndef f(x, t):\n    n = t.item()\n    y = x * n\n    return y[:n]\n",
        # No scalar read at all.
        "import torch\n\ndef f(x, t):\n    return x * t\n",
    )

    INVALID = (
        (
            "import torch\n\ndef f(x, t):\n    return x * t.item()\n",
            "import torch\n\n\n" + HELPER_CODE.format(helper=HELPER, hold=HOLD, torch="torch").lstrip("\n")
            + "\ndef f(x, t):\n    return x * _graphmend_scalar(t, x, \"*\")\n",
        ),
        (
            "import torch\n\ndef f(self, h, w):\n    s = w.sum().item()\n    y = h - s\n    return (s + self.bias) * (y > s)\n",
            "import torch\n\n\n" + HELPER_CODE.format(helper=HELPER, hold=HOLD, torch="torch").lstrip("\n")
            + "\ndef f(self, h, w):\n    s = _graphmend_hold(w.sum())\n    y = h - _graphmend_scalar(s, h, \"-\", \"held\")\n"
            "    return (_graphmend_scalar(s, self.bias, \"+\", \"held\") + self.bias) * (y > _graphmend_scalar(s, y, \">\", \"held\"))\n",
        ),
        (
            "import torch\n\ndef f(x, t):\n    return x / float(t) + int(t) * x\n",
            "import torch\n\n\n" + HELPER_CODE.format(helper=HELPER, hold=HOLD, torch="torch").lstrip("\n")
            + "\ndef f(x, t):\n    return x / _graphmend_scalar(t, x, \"/\", \"float\") + _graphmend_scalar(t, x, \"*\", \"int\") * x\n",
        ),
    )

    # -- sites ------------------------------------------------------------------------

    def prefilter(self, text: str) -> bool:
        return "torch" in text and (".item()" in text or "float(" in text or "int(" in text)

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        """Simple statements and compound-statement headers (inside a function) holding a scalar read.

        A header (`if t.item() > 0:`, `for _ in range(n.item()):`) is never rewritten, but in
        dynamic mode it is reported with the reason.
        """
        for node in A._iter(source.module):
            if isinstance(node, (cst.If, cst.While)):
                part: Optional[cst.CSTNode] = node.test
            elif isinstance(node, cst.For):
                part = node.iter
            elif isinstance(node, cst.BaseSmallStatement):
                part = node
            else:
                continue
            if source.enclosing(node, (cst.FunctionDef,)) is None:
                continue
            if any(isinstance(c, cst.Call) and _scalar_kind(c) for c in A._iter(part)):
                yield part

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        return range(source.line(node), source.end_line(node) + 1)

    def run(self, source: SourceFile, ctx: RuleContext, lines: Optional[Iterable[int]] = None) -> list:
        if lines is not None:
            return super().run(source, ctx, lines)
        # Static mode: `float(x)` on a Python value is everywhere; only sites where every read is
        # evidently fixable are offered (a decline there would only be noise).
        outcomes = super().run(source, ctx, None)
        return [o for o in outcomes if not isinstance(o, Decline)]

    # -- the proof --------------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        try:
            return self._rewrite(node, source, ctx)
        except _Declined as exc:
            return self.decline(source, node, str(exc))

    def _rewrite(self, stmt: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Fix:
        func = source.enclosing(stmt, (cst.FunctionDef,))
        assert isinstance(func, cst.FunctionDef)
        for builtin in ("float", "int"):
            if _module_binds(source, builtin):
                raise _Declined(f"the module rebinds `{builtin}`")
        if {HELPER, HOLD} & A.names_in(func.params):
            raise _Declined(f"the function already uses the name `{HELPER}`")
        header_of = source.parent(stmt)
        if isinstance(header_of, (cst.If, cst.While, cst.For)):
            # Dynamo needs the number itself here: it picks the path, or the iteration count.
            raise _Declined(f"the scalar read decides Python control flow ({_describe(header_of)[:-len(' (Python control flow)')]}); "
                            "no tensor form computes a jump or an iteration count")
        reads = [c for c in A._iter(stmt) if isinstance(c, cst.Call) and _scalar_kind(c)]
        if isinstance(stmt, cst.Assert) and isinstance(stmt.test, cst.Comparison) and any(
                r is stmt.test.left or any(r is t.comparator for t in stmt.test.comparisons) for r in reads):
            # The other side is often a Python int (a length): the helper would keep the number
            # and the break. GM303 compares on the tensor where exact and keeps AssertionError.
            raise _Declined("the scalar is a side of an assertion's comparison, which GM303 (assert-on-scalar-read) "
                            "checks on the tensor")
        changes: dict = {}
        notes: list[str] = []
        held: Optional[str] = None
        for call in reads:
            kind, value = _scalar_kind(call)  # type: ignore[misc]
            if any(isinstance(n, cst.NamedExpr) for n in A._iter(value)):
                raise _Declined(f"`{A.code(call)}` assigns with `:=`")
            if any(r is not call and _contains(r, call) for r in reads):
                raise _Declined(f"`{A.code(call)}` is nested in another scalar read")
            if (kind == "item" and isinstance(stmt, cst.Assign) and stmt.value is call and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0].target, cst.Name)):
                held = stmt.targets[0].target.value
                changes[call] = cst.parse_expression(f"{HOLD}({A.code(value)})")
                for use in _uses(func, held, stmt, source):
                    changes[use] = _operand_replacement(use, use, "held", source)
                notes.append(f"`{held}` holds a 0-d tensor; each use converts it exactly as before where needed")
                continue
            changes[call] = _operand_replacement(call, value, kind, source)
        if not changes:
            raise _Declined("no scalar read to keep as a tensor")
        tree = source.replace_many(source.module, changes)
        torch_name = source.torch_name() or "torch"
        tree = source.with_helper(tree, HELPER, HELPER_CODE.format(helper=HELPER, hold=HOLD, torch=torch_name).lstrip("\n"))
        if source.torch_name() is None:
            tree = source.with_import(tree)
        what = f"`{held}`" if held else ", ".join(f"`{A.code(c)}`" for c in reads)
        return source.fix_from(
            tree,
            rule=self.code,
            title=f"Keep {what} a 0-d tensor in the arithmetic (no Python number, no graph break)",
            safety=Safety.SAFE,
            site=stmt,
            notes="; ".join(notes + ["the helper returns the Python number, as before, wherever a 0-d tensor would "
                                     "promote or round differently (checked on dtypes and devices, constants under Dynamo)"]),
        )


def _describe(node: Optional[cst.CSTNode]) -> str:
    """A short phrase for where a value is used, for decline reasons."""
    if isinstance(node, cst.If):
        return "an `if` test (Python control flow)"
    if isinstance(node, cst.While):
        return "a `while` test (Python control flow)"
    if isinstance(node, cst.For):
        return "a `for` loop's iterable (Python control flow)"
    if node is None or isinstance(node, cst.BaseStatement):
        return "a statement"
    text = A.code(node)
    return f"`{text}`" if len(text) < 70 else f"`{text[:66]}...`"


def _contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    return any(n is inner for n in A._iter(outer))


def _operand_replacement(node: cst.CSTNode, value: cst.CSTNode, kind: str, source: SourceFile) -> cst.BaseExpression:
    """``_graphmend_scalar(value, other, op, kind)`` for a scalar that is an operand of a tensor op."""
    parent = source.parent(node)
    shown = A.code(node)
    if isinstance(parent, cst.BinaryOperation):
        entry = _BINARY.get(type(parent.operator))
        if entry is None:
            raise _Declined(
                f"`{shown}` is an operand of `{A.code(parent)}`; with that operator a 0-d tensor does not compute "
                "what a Python number does (`**` picks a kernel by value, `//` and `%` round differently)"
            )
        left_ok, op = entry
        on_left = parent.left is node
        other = parent.right if on_left else parent.left
        if on_left and not left_ok:
            raise _Declined(f"`{A.code(parent)}`: a Python number divided by a tensor is `x.reciprocal() * s`, "
                            "not a division; a 0-d tensor would round differently")
    elif isinstance(parent, cst.ComparisonTarget) or isinstance(parent, cst.Comparison):
        comparison = parent if isinstance(parent, cst.Comparison) else source.parent(parent)
        assert isinstance(comparison, cst.Comparison)
        if len(comparison.comparisons) != 1:
            raise _Declined(f"`{A.code(comparison)}` is a chained comparison (it takes the truth value of a tensor)")
        target = comparison.comparisons[0]
        op = _COMPARE.get(type(target.operator))
        if op is None:
            raise _Declined(f"`{A.code(comparison)}` compares with `is`/`in`")
        other = target.comparator if comparison.left is node else comparison.left
    else:
        if isinstance(parent, cst.Arg) and isinstance(source.parent(parent), cst.Call):
            callee = A.code(source.parent(parent).func)  # type: ignore[union-attr]
            raise _Declined(f"the value of `{shown}` is passed to `{callee}()` as a Python number, not used as an "
                            "operand of tensor arithmetic")
        raise _Declined(f"the value of `{shown}` is used as a Python number in {_describe(parent)}, not as an operand of tensor arithmetic")
    if not _is_plain_read(other):
        kind_word = "a Python number" if isinstance(other, (cst.Integer, cst.Float)) else "not a plain name or attribute"
        raise _Declined(
            f"the other operand of `{shown}` (`{A.code(other)}`) is {kind_word}; the helper must read it without "
            "evaluating it twice" if kind_word != "a Python number"
            else f"`{shown}` meets the Python number `{A.code(other)}`, not a tensor: that is Python arithmetic, and a "
            "0-d tensor would round and promote differently"
        )
    args = f"{A.code(value)}, {A.code(other)}, \"{op}\"" + ("" if kind == "item" else f", \"{kind}\"")
    new = cst.parse_expression(f"{HELPER}({args})")
    return new.with_changes(lpar=getattr(node, "lpar", ()), rpar=getattr(node, "rpar", ()))


def _uses(func: cst.FunctionDef, name: str, assign: cst.CSTNode, source: SourceFile) -> list[cst.Name]:
    """Every read of ``name`` in ``func`` besides ``assign``; declines on any other binding or use."""
    uses: list[cst.Name] = []
    target = assign.targets[0].target  # type: ignore[attr-defined]
    for n in A._iter(func):
        if not isinstance(n, cst.Name) or n.value != name or n is target:
            continue
        parent = source.parent(n)
        if isinstance(parent, cst.Attribute) and parent.attr is n:
            continue  # `obj.name` is another variable
        if isinstance(parent, (cst.Arg,)) and parent.keyword is n:
            continue
        scope_owner = source.enclosing(n, (cst.FunctionDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp))
        if scope_owner is not func:
            raise _Declined(f"`{name}` is read inside a nested function or comprehension (line {source.line(n)})")
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName, cst.Param,
                               cst.Global, cst.Nonlocal, cst.Del, cst.NamedExpr)) or isinstance(parent, cst.Tuple):
            raise _Declined(f"`{name}` is bound again at line {source.line(n)}; it must be assigned once")
        if isinstance(parent, cst.Param) or n in _param_names(func):
            raise _Declined(f"`{name}` is a parameter")
        uses.append(n)
    if not uses:
        raise _Declined(f"`{name}` is never used")
    return uses


def _param_names(func: cst.FunctionDef) -> list[cst.Name]:
    p = func.params
    params = list(p.params) + list(p.posonly_params) + list(p.kwonly_params)
    params += [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
    return [x.name for x in params]


def _module_binds(source: SourceFile, name: str) -> bool:
    scope = source.scopes.get(source.module)
    return bool(scope is not None and name in scope and scope.assignments[name])
