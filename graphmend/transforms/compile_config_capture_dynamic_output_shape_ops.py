"""GM502 compile-config-capture-dynamic-output-shape-ops: ``nonzero``/``unique``/masks captured.

An operator whose output *shape* depends on tensor values (``torch.nonzero``, ``unique``,
``masked_select``, ``argwhere``, ``repeat_interleave`` with tensor repeats, boolean-mask indexing
``x[x > 0]``) ends the graph (GB0036, "Dynamic shape operator") unless
``torch._dynamo.config.capture_dynamic_output_shape_ops`` is on; then the size is an unbacked
symbol and the operator stays in the graph. Measured under torch 2.13: ``nonzero``, ``x[x > 0]``,
``unique`` and ``repeat_interleave`` each go from a break to one graph, outputs equal.
No source rewrite gives these operators a static shape exactly, so this lever is the only fix.

See ``_compile_config.py`` for where the setting goes and when nothing is proposed (a result whose
length drives a Python loop or an ``if``).
"""

from __future__ import annotations

import libcst as cst

from graphmend.model import Category, Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms._compile_config import (
    WRAPPER,
    WRAPPER_CODE,
    CompileConfigLever,
    Trigger,
    statement_at,
    statement_of,
)
from graphmend.transforms.base import SourceFile

_HELPER = WRAPPER_CODE.format(wrapper=WRAPPER, torch="torch").lstrip("\n")

# torch.<op>(...) and tensor.<op>(...) whose output size depends on values.
DYNAMIC_SHAPE_OPS = frozenset(("nonzero", "unique", "unique_consecutive", "masked_select", "argwhere", "repeat_interleave"))
_MASK_OPS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)


def _is_mask(expr: cst.CSTNode) -> bool:
    """An evidently boolean tensor expression used as an index: ``x > 0``, ``~m & (y < 1)``, ``isnan(x)``."""
    if isinstance(expr, cst.Comparison):
        return len(expr.comparisons) == 1 and isinstance(expr.comparisons[0].operator, _MASK_OPS)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
        return _is_mask(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr)):
        return _is_mask(expr.left) or _is_mask(expr.right)
    if isinstance(expr, cst.Call):
        name = A.dotted(expr.func).split(".")[-1]
        return name in A.BOOL_ELEMENTWISE
    return False


class CaptureDynamicOutputShapeOps(CompileConfigLever):
    code = "GM502"
    name = "compile-config-capture-dynamic-output-shape-ops"
    summary = "`nonzero`/`unique`/boolean-mask indexing: compile with capture_dynamic_output_shape_ops, around every call"
    safety = Safety.SAFE
    categories = (Category.DYNAMIC_SHAPE,)
    gb_types = ("Dynamic shape operator",)
    setting = "capture_dynamic_output_shape_ops"
    what = "dynamic-shape operators"

    docs = {
        "What it does": (
            "Finds a compiled function or module whose code calls an operator with a data-dependent output "
            "shape (`nonzero`, one-argument `torch.where`, `unique`, `unique_consecutive`, `masked_select`, `argwhere`, "
            "`repeat_interleave`, or indexes with a boolean mask such as `x[x > 0]`), and wraps the compiled "
            "object at its compile site so that every call runs under "
            "`torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)`. When the compile site is not "
            "in the repository, the finding says what to add there."
        ),
        "Why it breaks the graph": (
            "A graph needs every output shape as a function of the input shapes. `nonzero(x)` has as many rows "
            "as `x` has non-zero elements, known only at run time (GB0036, *Dynamic shape operator*). With "
            "`capture_dynamic_output_shape_ops` Dynamo gives that size an unbacked symbol and keeps tracing. "
            "The setting is read at tracing time (each first call and recompilation), so it must be in force "
            "around every call."
        ),
        "Example": (
            "```python\n"
            "@torch.compile\n"
            "def route(hidden, expert_mask):\n"
            "    token_idx = torch.nonzero(expert_mask).squeeze(1)\n"
            "    return hidden[token_idx] * 2\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "@_graphmend_with_config(capture_dynamic_output_shape_ops=True)\n"
            "@torch.compile\n"
            "def route(hidden, expert_mask):\n"
            "    ...\n"
            "```\n"
            "Where you compile elsewhere: `with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True): "
            "out = compiled(x)` around every call."
            "\n\nThe helper, to copy where the compile site is outside this repository:\n\n```python\n" + _HELPER + "```"
        ),
        "Fix safety": (
            "Safe on a verified target: the setting changes how Dynamo traces, not what is computed; "
            "re-detection and `graphmend verify` prove the break gone and the outputs equal, and count "
            "recompilations (an unbacked size Dynamo must guard on recompiles). Unsafe when found by reading "
            "the source only. Nothing is proposed when such a result's size decides Python control flow (`for "
            "i in torch.nonzero(m)`, `if idx.numel():`, `len()`), where the break or a recompilation per value "
            "remains."
        ),
        "References": (
            "`torch._dynamo.config.capture_dynamic_output_shape_ops`; Dynamo graph-break registry GB0036; "
            "https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html"
        ),
    }

    VALID = (
        # The result's length drives a Python loop.
        "import torch\n\n\n@torch.compile\ndef f(x):\n    for i in torch.nonzero(x):\n        x = x + 1\n    return x\n",
        # No dynamic-shape operator.
        "import torch\n\n\n@torch.compile\ndef f(x):\n    return torch.where(x > 0, x, 0.0)\n",
        # Not compiled in this file.
        "import torch\n\n\ndef f(x):\n    return x[x > 0]\n",
    )

    INVALID = (
        (
            "import torch\n\n\n@torch.compile(backend=\"eager\")\ndef f(x):\n    return x[x > 0].sum()\n",
            "import torch\n\n\n" + _HELPER
            + "\n\n@_graphmend_with_config(capture_dynamic_output_shape_ops=True)\n@torch.compile(backend=\"eager\")\n"
            "def f(x):\n    return x[x > 0].sum()\n",
        ),
        (
            "import torch\n\n\ndef route(h, m):\n    idx = torch.nonzero(m).squeeze(1)\n    return h[idx] * 2\n\n\n"
            "route_c = torch.compile(route)\n",
            "import torch\n\n\n" + _HELPER
            + "\n\ndef route(h, m):\n    idx = torch.nonzero(m).squeeze(1)\n    return h[idx] * 2\n\n\n"
            "route_c = _graphmend_with_config(torch.compile(route), capture_dynamic_output_shape_ops=True)\n",
        ),
    )

    def triggers(self, node: cst.CSTNode, source: SourceFile, *, dynamic: bool) -> list[Trigger]:
        found: list[Trigger] = []
        for n in A._iter(node):
            if isinstance(n, cst.Call):
                name = A.dotted(n.func).split(".")[-1] if A.dotted(n.func) else (
                    n.func.attr.value if isinstance(n.func, cst.Attribute) else "")
                single_where = name == "where" and len(n.args) == 1 and n.args[0].keyword is None
                if name in DYNAMIC_SHAPE_OPS or single_where:  # torch.where(c) is nonzero(c, as_tuple=True)
                    found.append(Trigger(n, statement_of(n, source)))
            elif isinstance(n, cst.Subscript) and len(n.slice) == 1 and isinstance(n.slice[0].slice, cst.Index):
                if _is_mask(n.slice[0].slice.value):
                    found.append(Trigger(n, statement_of(n, source)))
        return found

    def fallback(self, func: cst.FunctionDef, line: int, source: SourceFile) -> list[Trigger]:
        # Dynamo reported a dynamic-shape operator here that the source does not show evidently
        # (`x[mask]` with a boolean `mask`); a statement reading a scalar is GM501's instead.
        stmt = statement_at(func, line, source)
        if stmt is None or any(isinstance(c, cst.Call) and _reads_scalar(c) for c in A._iter(stmt)):
            return []
        value = getattr(stmt, "value", None)
        return [Trigger(value if isinstance(value, cst.BaseExpression) else stmt, stmt)]


def _reads_scalar(call: cst.Call) -> bool:
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("item", "tolist") and not call.args:
        return True
    return isinstance(call.func, cst.Name) and call.func.value in ("int", "float", "bool")
