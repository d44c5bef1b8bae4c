"""GM203 warning-in-compiled-region: ``warnings.warn`` inside a compiled region, deferred.

The replay calls ``warnings.warn_explicit`` with what ``warnings.warn(stacklevel=1)`` would have
computed at the call: the file, the line, the module's ``__name__``, the module's own
``__warningregistry__`` (so "once per location" filters are shared with eager calls) and its
globals. See ``_deferral.py``.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms import _boundary as B
from graphmend.transforms._deferral import DeferredCallRule, imported_names, is_int_literal, keyword, positional
from graphmend.transforms.base import SourceFile

_BEFORE = '''import warnings

import torch


class Head(torch.nn.Module):
    def forward(self, logits, mask=None):
        if mask is None:
            warnings.warn("no mask given; attending to padding", UserWarning)
        return logits.softmax(-1)
'''

_AFTER = '''import warnings

import torch


class Head(torch.nn.Module):
    def forward(self, logits, mask=None):
        if mask is None:
            _graphmend_deferred(warnings.warn, "warn", 9, "forward")("no mask given; attending to padding", UserWarning)
        return logits.softmax(-1)
''' + B.RUNTIME


class WarningInCompiledRegion(DeferredCallRule):
    code = "GM203"
    name = "warning-in-compiled-region"
    summary = "warnings.warn in a compiled region: record it in the graph, issue it after the compiled call"
    gb_types = ("Attempted to call function marked as skipped",)

    docs = {
        "What it does": (
            "Finds `warnings.warn(...)` statements (also `warn(...)` imported from `warnings`) in code that "
            "runs under `torch.compile` and wraps the callee in `_graphmend_deferred(...)`. Eager mode warns "
            "as written. Under compile the arguments are copied into the graph and, after the compiled "
            "call, `warnings.warn_explicit` issues the warning with the same category, message, filename "
            "and line, the module's `__name__` and its `__warningregistry__` (so `default`/`once` filters "
            "show it once per location, as before)."
        ),
        "Why it breaks the graph": (
            "`warnings.warn` is a C function Dynamo marks as skipped (*Attempted to call function marked as "
            "skipped*, GB0007): the graph ends at the call and resumes after it."
        ),
        "Example": "```python\n" + _BEFORE + "```",
        "Use instead": (
            "```python\n            _graphmend_deferred(warnings.warn, \"warn\", 9, \"forward\")(\"no mask given; attending to padding\", UserWarning)\n```\n"
            "(the graphmend runtime is appended to the module), or warn before calling the compiled model."
        ),
        "Fix safety": (
            "Safe when a boundary is proven and nothing after the call in the compiled region raises on "
            "tensor values: the same warnings (category, message, filename, lineno) are issued, at the end "
            "of the compiled call. Under `-W error` the exception is raised at the boundary, after the "
            "compiled call, instead of at the call. Unsafe when the region may raise after the call "
            "(records of a call that raises are lost). In a file with no forward (a mixin, a utility), "
            "dynamic mode may prove the compiled entries of other files of the package that Dynamo's "
            "stacks name: the warning is recorded under those only (`entries=`), where the code after "
            "the call was read and nothing there may fail on values (an index, an embedding lookup) or "
            "print; under any other entry it runs as written. Without a proven boundary the fix offered is the "
            "`is_compiling()` guard (unsafe: no warning under compile). Declined: the result is used, "
            "`stacklevel` other than 1 (it names a caller's line, known only to the running stack), "
            "`skip_file_prefixes=`."
        ),
        "References": (
            "DESIGN.md, *Deferred side effects*; https://docs.python.org/3/library/warnings.html#warnings.warn_explicit"
        ),
    }

    VALID = (
        # stacklevel=2 reports the caller's line
        "import warnings\nimport torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
        "        warnings.warn('deprecated', DeprecationWarning, stacklevel=2)\n        return x\n",
        # not the warnings module
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        self.warnings.warn('x')\n        return x\n",
    )
    INVALID = ((_BEFORE, _AFTER),)

    def classify(self, call: cst.Call, source: SourceFile) -> Optional[str]:
        func = call.func
        modules, members = imported_names(source, "warnings")
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in modules and func.attr.value == "warn":
            return "warn"
        if isinstance(func, cst.Name) and members.get(func.value) == "warn":
            return "warn"
        return None

    def refuse(self, call: cst.Call, source: SourceFile, kind: str) -> Optional[str]:
        args = positional(call)
        level = keyword(call, "stacklevel") or (args[2] if len(args) > 2 else None)
        if level is not None and not is_int_literal(level, 1):
            return "stacklevel other than 1 names a caller's line, which only the running stack knows"
        if keyword(call, "skip_file_prefixes") is not None:
            return "skip_file_prefixes= depends on the running stack"
        if not args and keyword(call, "message") is None:
            return "warnings.warn(...) without a message"
        return None
