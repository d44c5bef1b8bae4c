"""GM201 print-in-compiled-region: ``print`` inside a compiled region, deferred to the boundary.

See ``_deferral.py`` for the rewrite and its legality conditions and ``_boundary.py`` for the
runtime that records and replays the call.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms import _boundary as B
from graphmend.transforms._deferral import DeferredCallRule
from graphmend.transforms.base import SourceFile

_BEFORE = '''import torch


class Scale(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("scaled", y.sum(), sep=": ")
        return y
'''

_AFTER = '''import torch


class Scale(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        _graphmend_deferred(print, "call")("scaled", y.sum(), sep=": ")
        return y
''' + B.RUNTIME


class PrintInCompiledRegion(DeferredCallRule):
    code = "GM201"
    name = "print-in-compiled-region"
    summary = "print() in a compiled region: record it in the graph, replay it after the compiled call"
    gb_types = ("Failed to trace builtin operator",)

    docs = {
        "What it does": (
            "Finds a `print(...)` statement in code that runs under `torch.compile` and wraps the callee: "
            "`_graphmend_deferred(print, \"call\")(...)`. In eager mode that is `print` itself. Under "
            "compile the arguments are copied into the graph (tensors cloned, lists/tuples/dicts copied) "
            "and the print runs after the compiled call, in order with the other deferred calls, with the "
            "same `sep=`, `end=`, `file=` and `flush=`. A small runtime is appended to the module; it makes "
            "every module class's `forward` here (and each function compiled here) the replay boundary."
        ),
        "Why it breaks the graph": (
            "Dynamo cannot put `print` of a tensor into a graph (*Failed to trace builtin operator*, "
            "GB0059): it ends the graph, prints eagerly and starts a new graph after it."
        ),
        "Example": "```python\n" + _BEFORE + "```",
        "Use instead": (
            "```python\n        _graphmend_deferred(print, \"call\")(\"scaled\", y.sum(), sep=\": \")\n```\n"
            "(with the graphmend runtime appended to the module), or print outside the compiled model."
        ),
        "Fix safety": (
            "Safe when a boundary is proven (the print is inside a module class of this file that defines "
            "`forward`, or a function compiled here) and nothing after it in the compiled region raises on "
            "tensor values: eager output is identical; under compile the text is the same, printed at the "
            "end of the compiled call. Tensors are printed as copied at the call, without `grad_fn`. "
            "Unsafe when the region may raise after the print: a compiled call that raises loses its "
            "records. Without a proven boundary the fix offered is `if not torch.compiler.is_compiling(): "
            "print(...)` (unsafe: nothing is printed under compile). Declined when the result is used."
        ),
        "References": (
            "DESIGN.md, *Deferred side effects*; "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html"
        ),
    }

    VALID = (
        # the result is used
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        r = print(x)\n        return x\n",
        # print is rebound in the module
        "import torch\n\nprint = len\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        print(x)\n        return x\n",
        # module level: not in a compiled region
        "import torch\n\nprint('loading')\n",
    )
    INVALID = ((_BEFORE, _AFTER),)

    def classify(self, call: cst.Call, source: SourceFile) -> Optional[str]:
        if isinstance(call.func, cst.Name) and call.func.value == "print" and not B.module_binds(source, "print"):
            return "call"
        return None
