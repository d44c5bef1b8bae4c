"""GM302 tensor-equal-guard: ``if not torch.equal(a, b): raise E("literal")`` lowered in-graph.

``torch.equal`` returns a Python bool, so Dynamo has to run it eagerly (``aten.equal`` is a
*data dependent operator*). Under ``torch.compile`` the rewrite computes the same answer as a
0-d tensor — a static shape check first (``torch.equal`` never broadcasts, ``==`` would), then
``(a == b).all()`` (both promote dtypes, and NaN is unequal in both) — and hands it to the same
in-graph assertion as GM301 (see ``raise_on_tensor_condition.py``); eager mode still calls
``torch.equal``.
"""

from __future__ import annotations

from typing import Union

import libcst as cst

from graphmend.model import Category, Edit
from graphmend.transforms import _boundary as B
from graphmend.transforms.base import SourceFile
from graphmend.transforms.raise_on_tensor_condition import RaiseOnTensorCondition, _equal_call, _inner_test

_BEFORE = '''import torch


class Tied(torch.nn.Module):
    def forward(self, weight, reference):
        if not torch.equal(weight, reference):
            raise ValueError("the tied weights diverged")
        return weight * 2
'''

_AFTER = '''import torch


class Tied(torch.nn.Module):
    def forward(self, weight, reference):
        if not _graphmend_trap(_graphmend_equal(weight, reference), ValueError, 'the tied weights diverged', False, entries=(__name__ + '.Tied',)):
            raise ValueError("the tied weights diverged")
        return weight * 2
''' + B.RUNTIME


class TensorEqualGuard(RaiseOnTensorCondition):
    code = "GM302"
    name = "tensor-equal-guard"
    summary = "`if not torch.equal(a, b): raise E(\"...\")`: a shape check plus an in-graph (a == b).all() assertion"
    # aten.equal breaks as a data-dependent operator; detection files it under dynamic shapes.
    categories = (Category.VALIDATION, Category.DYNAMIC_SHAPE)
    gb_types = ("Data dependent operator",)

    docs = {
        "What it does": (
            "Finds `if torch.equal(a, b): raise E(\"literal\")` and `if not torch.equal(a, b): raise ...` and "
            "rewrites the condition to `_graphmend_trap(_graphmend_equal(a, b), E, \"literal\", ...)`. Eager "
            "mode calls `torch.equal` as before. Under `torch.compile` `_graphmend_equal` compares the shapes "
            "(static while tracing) and then `(a == b).all()`, and the check becomes an in-graph "
            "`torch._assert_async` whose exception the boundary restores, as for GM301."
        ),
        "Why it breaks the graph": (
            "`torch.equal` returns a Python bool computed from tensor values; Dynamo cannot keep it in the "
            "graph (*Data dependent operator*, `aten.equal.default`), so the graph ends before it."
        ),
        "Example": "```python\n" + _BEFORE + "```",
        "Use instead": (
            "```python\n        if not _graphmend_trap(_graphmend_equal(weight, reference), ValueError, "
            "'the tied weights diverged', False):\n            raise ValueError(\"the tied weights diverged\")\n```"
        ),
        "Fix safety": (
            "As GM301: safe when the boundary is proven (CPU: same exception type and message on the failing "
            "path, checked in a throwaway process; on CUDA the Python branch stays); unsafe otherwise. "
            "`(a == b).all()` after an exact shape check agrees with `torch.equal` on every input: dtypes "
            "promote in both, NaN compares unequal in both, empty tensors are equal in both. Declined as "
            "GM301 declines (dynamic message, custom exception, longer body, inside a `try`), and when "
            "`torch.equal` is not the whole condition."
        ),
        "References": (
            "DESIGN.md, *Trap lowering*; https://pytorch.org/docs/stable/generated/torch.equal.html"
        ),
    }

    VALID = (
        # torch.equal inside a larger condition
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, a, b):\n"
        "        if torch.equal(a, b) or a.sum() > 0:\n            raise ValueError('x')\n        return a\n",
        # the result feeds a value, not a raise
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, a, b):\n        same = torch.equal(a, b)\n        return a, same\n",
        # dynamic message
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, a, b):\n"
        "        if not torch.equal(a, b):\n            raise ValueError(f'{a} != {b}')\n        return a\n",
    )
    INVALID = ((_BEFORE, _AFTER),)

    def candidate(self, node: cst.If) -> bool:
        return _equal_call(_inner_test(node)) is not None

    def sites(self, source: SourceFile):
        return (node for node in super().sites(source) if self.candidate(node))  # type: ignore[arg-type]

    def lower_test(self, test: cst.BaseExpression, source: SourceFile, node: cst.If) -> Union[str, tuple[str, str]]:
        if _equal_call(test) is None:
            return "the condition is not exactly `torch.equal(a, b)` (or its negation)"
        return (f"{B.TRAP}(", "")

    def adjust(self, edit: Edit, test: cst.BaseExpression, source: SourceFile) -> Edit:
        func = source.code(test.func)  # type: ignore[attr-defined]
        old = f"{B.TRAP}({func}("
        assert old in edit.new_text
        return Edit(edit.file, edit.start_line, edit.end_line, edit.new_text.replace(old, f"{B.TRAP}({B.EQUAL}(", 1), edit.old_text)
