"""GM501 compile-config-capture-scalar-outputs: ``.item()`` captured with ``capture_scalar_outputs``.

Where a scalar read from a tensor is used as a Python number in a way no exact tensor rewrite
covers (a slice bound ``x[:n]``, a size ``torch.zeros(n)``, arithmetic before it meets a tensor),
Dynamo can still keep it in the graph as an unbacked symbolic number when
``torch._dynamo.config.capture_scalar_outputs`` is on. Measured under torch 2.13: ``x[:t.item()]``
and ``torch.zeros(int(t.item()))`` give one graph and no break with the setting, across calls
with different values (no recompilation). Reads GM401 rewrites exactly are left to GM401.

See ``_compile_config.py`` for where the setting goes (around every call of the compiled object)
and when nothing is proposed.
"""

from __future__ import annotations

import libcst as cst

from graphmend.model import Category, Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms._compile_config import WRAPPER, WRAPPER_CODE, CompileConfigLever, Trigger, statement_of
from graphmend.transforms.base import RuleContext, SourceFile

_HELPER = WRAPPER_CODE.format(wrapper=WRAPPER, torch="torch").lstrip("\n")


def _gm401_fixes(stmt: cst.CSTNode, source: SourceFile) -> bool:
    """Whether GM401 rewrites this statement's scalar reads exactly (then this lever is not needed)."""
    from graphmend.model import Fix
    from graphmend.transforms.scalar_item_in_tensor_arithmetic import ScalarItemInTensorArithmetic

    return isinstance(ScalarItemInTensorArithmetic().rewrite(stmt, source, RuleContext(verified=True)), Fix)


class CaptureScalarOutputs(CompileConfigLever):
    code = "GM501"
    name = "compile-config-capture-scalar-outputs"
    summary = "`.item()` used as a Python number: compile with capture_scalar_outputs, around every call"
    safety = Safety.SAFE
    # "Data dependent operator" (`aten._local_scalar_dense`, e.g. `.tolist()` of an integer
    # tensor) is filed as a dynamic-shape break, but Dynamo's hint is this setting.
    categories = (Category.SCALAR, Category.DYNAMIC_SHAPE)
    gb_types = ("Unsupported Tensor.item() call with capture_scalar_outputs=False",)
    setting = "capture_scalar_outputs"
    what = "scalar reads"

    docs = {
        "What it does": (
            "Finds a compiled function or module whose code reads a Python number from a tensor "
            "(`t.item()`, `int(t)`, `float(t)`) and uses it where no exact tensor rewrite exists (a slice "
            "bound, a size, Python arithmetic), and wraps the compiled object at its compile site so that "
            "every call runs under `torch._dynamo.config.patch(capture_scalar_outputs=True)`. When the "
            "compile site is not in the repository, the finding says what to add there."
        ),
        "Why it breaks the graph": (
            "By default Dynamo does not trace `Tensor.item()` (GB0124): the value is data, unknown while "
            "tracing. With `capture_scalar_outputs` it becomes an unbacked symbolic integer or float that "
            "the graph carries. The setting is read when Dynamo traces, at the first call and at every "
            "recompilation, so it must be in force around every call: around `torch.compile()` it does "
            "nothing, inside the compiled function it is itself a break (\"Unsupported context manager\")."
        ),
        "Example": (
            "```python\n"
            "class Pool(torch.nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        n = lengths.max().item()\n"
            "        return x[:, :n].mean(1)\n\n"
            "model = torch.compile(Pool())\n"
            "```"
        ),
        "Use instead": (
            "```python\n"
            "model = _graphmend_with_config(torch.compile(Pool()), capture_scalar_outputs=True)\n"
            "```\n"
            "`_graphmend_with_config` (added once to the module) runs each call under the setting; a "
            "module keeps its type. Where you compile elsewhere: "
            "`with torch._dynamo.config.patch(capture_scalar_outputs=True): out = compiled(x)` around every call."
            "\n\nThe helper, to copy where the compile site is outside this repository:\n\n```python\n" + _HELPER + "```"
        ),
        "Fix safety": (
            "Safe on a verified target (the setting changes how Dynamo traces, not what the program "
            "computes; re-detection and `graphmend verify` prove the break gone, the outputs equal and count "
            "recompilations: unbacked sizes can recompile where Dynamo guards on them). Unsafe when found by "
            "reading the source only. Nothing is proposed when a read anywhere in the compiled code decides "
            "Python control flow (`if t.item() > 0`, `range(t.item())`, `while`, `bool()`, `len()`): with the "
            "setting such a read still breaks (measured: one more graph) or is specialised with a "
            "recompilation for every value. `.tolist()` on a float tensor is not captured by the setting."
        ),
        "References": (
            "`torch._dynamo.config.capture_scalar_outputs`; Dynamo graph-break registry GB0124; "
            "https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html (unbacked symbols)."
        ),
    }

    VALID = (
        # The scalar decides the iteration count: specialised per value, nothing proposed.
        "import torch\n\n\n@torch.compile\ndef f(x, t):\n    for _ in range(t.item()):\n        x = x + 1\n    return x\n",
        # The scalar picks a branch: still a break with the setting.
        "import torch\n\n\ndef f(x, t):\n    n = t.item()\n    if n > 0:\n        return x[:n]\n    return x\n\n\ng = torch.compile(f)\n",
        # Exact tensor rewrite exists: GM401's job.
        "import torch\n\n\n@torch.compile\ndef f(x, t):\n    return x * t.item()\n",
        # Already wrapped.
        "import torch\n\n\ndef f(x, t):\n    return x[: t.item()]\n\n\ng = _graphmend_with_config(torch.compile(f), capture_scalar_outputs=True)\n",
    )

    INVALID = (
        (
            "import torch\n\n\n@torch.compile\ndef f(x, t):\n    return x[: t.item()] * 2\n",
            "import torch\n\n\n" + _HELPER
            + "\n\n@_graphmend_with_config(capture_scalar_outputs=True)\n@torch.compile\ndef f(x, t):\n    return x[: t.item()] * 2\n",
        ),
        (
            "import torch\n\n\nclass Pool(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = lengths.max().item()\n        return x[:, :n].mean(1)\n\n\nmodel = torch.compile(Pool())\n",
            "import torch\n\n\n" + _HELPER
            + "\n\nclass Pool(torch.nn.Module):\n    def forward(self, x, lengths):\n"
            "        n = lengths.max().item()\n        return x[:, :n].mean(1)\n\n\n"
            "model = _graphmend_with_config(torch.compile(Pool()), capture_scalar_outputs=True)\n",
        ),
    )

    def triggers(self, node: cst.CSTNode, source: SourceFile, *, dynamic: bool) -> list[Trigger]:
        found: list[Trigger] = []
        for call in A._iter(node):
            if not isinstance(call, cst.Call):
                continue
            is_item = (isinstance(call.func, cst.Attribute) and not call.args
                       and (call.func.attr.value == "item" or dynamic and call.func.attr.value == "tolist"))
            is_conv = (dynamic and isinstance(call.func, cst.Name) and call.func.value in ("int", "float")
                       and len(call.args) == 1)
            if not (is_item or is_conv):
                continue
            stmt = statement_of(call, source)
            if isinstance(stmt, cst.BaseSmallStatement) and _gm401_fixes(stmt, source):
                continue
            found.append(Trigger(call, stmt))
        return found
