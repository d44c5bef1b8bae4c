"""GM301 raise-on-tensor-condition: ``if <tensor>: raise E("literal")`` lowered to an in-graph assert.

The rewrite wraps only the condition, keeping the ``raise`` where it was::

    if (scores < 0).any():
        raise ValueError("scores must be non-negative")

    if _graphmend_trap((scores < 0).any(), ValueError, "scores must be non-negative"):
        raise ValueError("scores must be non-negative")

In eager mode ``_graphmend_trap`` returns the condition itself: the same ``bool()``, the same
``raise``, the same traceback line. Under ``torch.compile`` on a one-element CPU tensor it emits
``torch._assert_async(logical_not(cond), "graphmend-trap:ValueError:<message>")`` — which stays
in the graph — and returns False; the boundary (``_boundary.py``) turns the ``RuntimeError`` the
assertion raises back into ``ValueError(message)``. For a condition on another device (CUDA,
where the assertion would be a fatal device-side error) or a non-builtin exception type the
runtime keeps the Python branch, and with it the original behaviour and the graph break.
``if not C: raise ...`` becomes ``if not _graphmend_trap(C, E, msg, False): raise ...``.
"""

from __future__ import annotations

import builtins
from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Edit, Fix, Safety
from graphmend.transforms import _boundary as B
from graphmend.transforms import _region as R
from graphmend.transforms import _trap as T
from graphmend.transforms.base import RuleContext, SourceFile, Transform, iter_nodes

_BEFORE = '''import torch


class Scorer(torch.nn.Module):
    def forward(self, scores):
        if (scores < 0).any():
            raise ValueError("scores must be non-negative")
        if not torch.isfinite(scores).all():
            raise OverflowError("scores overflowed")
        return scores.softmax(-1)
'''

_AFTER = '''import torch


class Scorer(torch.nn.Module):
    def forward(self, scores):
        if _graphmend_trap((scores < 0).any(), ValueError, 'scores must be non-negative', entries=(__name__ + '.Scorer',)):
            raise ValueError("scores must be non-negative")
        if not _graphmend_trap(torch.isfinite(scores).all(), OverflowError, 'scores overflowed', False, entries=(__name__ + '.Scorer',)):
            raise OverflowError("scores overflowed")
        return scores.softmax(-1)
''' + B.RUNTIME


class RaiseOnTensorCondition(Transform):
    code = "GM301"
    name = "raise-on-tensor-condition"
    summary = "`if <tensor>: raise E(\"...\")`: an in-graph torch._assert_async, the exception restored after the call"
    safety = Safety.SAFE
    categories = (Category.VALIDATION,)
    gb_types = ("Data-dependent branching",)

    docs = {
        "What it does": (
            "Finds `if <tensor condition>: raise E(\"literal\")` (and `if not C: raise ...`) and wraps the "
            "condition in `_graphmend_trap(C, E, \"literal\")`. In eager mode that is `C` itself. Under "
            "`torch.compile`, for a one-element CPU tensor, it becomes `torch._assert_async(...)` inside the "
            "graph, and the boundary appended to the module turns the assertion's `RuntimeError` back into "
            "`E(\"literal\")`: same type, same message."
        ),
        "Why it breaks the graph": (
            "`if tensor:` needs the tensor's value in Python (*Data-dependent branching*, GB0170): the graph "
            "ends before the check and a new one starts after it. `torch._check` / `torch._check_tensor_all` "
            "still break on a traced tensor under torch 2.13; `torch._assert_async` does not."
        ),
        "Example": "```python\n" + _BEFORE + "```",
        "Use instead": (
            "```python\n        if _graphmend_trap((scores < 0).any(), ValueError, 'scores must be non-negative', entries=(__name__ + '.Scorer',)):\n"
            "            raise ValueError(\"scores must be non-negative\")\n```\n(with the graphmend runtime appended)."
        ),
        "Fix safety": (
            "Safe when the boundary is proven (the check is inside a module class of this file that defines "
            "`forward`, or a function compiled here): eager mode is unchanged, and under compile on CPU the "
            "failing path raises the same builtin exception type with the same message (checked in a "
            "throwaway process); the traceback starts at the boundary instead of the `raise` line. On CUDA "
            "the runtime keeps the Python branch (a device-side assert would lose the message and the CUDA "
            "context), so the break remains there but nothing changes. Unsafe without a proven boundary "
            "(the caller would see `RuntimeError`). Declined: a message that is not a string literal, a "
            "non-builtin exception class, a body that does more than raise, `raise ... from ...`, a check "
            "inside a `try` that has handlers, `and`/`or` in the condition, `torch.equal`/`.item()` "
            "conditions (Python values, not tensors), state that may be written earlier in the same graph (on "
            "the way from an entry's `forward` to the check; a failing graph loses it; a property getter of "
            "this file is followed, and any other descriptor, an attribute named at run time, or `self.x` "
            "that a base class of another file may define as a property counts as a write). In a "
            "module-level helper the check names the entries it may be lowered under (`entries=(...)`). "
            "While a module hook is registered on the entry's modules (or globally, by any file) the "
            "runtime keeps the check as written."
        ),
        "References": (
            "DESIGN.md, *Trap lowering*; https://pytorch.org/docs/stable/generated/torch._assert_async.html; "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html"
        ),
    }

    VALID = (
        # dynamic message
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        if (x < 0).any():\n"
        "            raise ValueError(f'bad {x.shape}')\n        return x\n",
        # custom exception class
        "import torch\n\n\nclass Bad(Exception):\n    pass\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
        "        if (x < 0).any():\n            raise Bad('negative')\n        return x\n",
        # body longer than the raise
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        if (x < 0).any():\n"
        "            print('bad')\n            raise ValueError('negative')\n        return x\n",
        # inside a try that catches it
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        try:\n            if (x < 0).any():\n"
        "                raise ValueError('negative')\n        except ValueError:\n            x = -x\n        return x\n",
        # a Python-valued check Dynamo resolves while tracing: not a candidate
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x, y=None):\n        if y is not None and x.dim() != 2:\n"
        "            raise ValueError('2-d please')\n        return x\n",
    )
    INVALID = ((_BEFORE, _AFTER),)

    # -- sites --------------------------------------------------------------------------------

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for node in iter_nodes(source.module, (cst.If,)):
            if _raise_of(node) is not None:  # type: ignore[arg-type]
                yield node

    def static_candidate(self, node: cst.CSTNode, source: SourceFile) -> bool:
        # Without a Dynamo report only checks that read tensor values are candidates: an
        # argument check on Python values is resolved by Dynamo while tracing, never a break.
        return self.candidate(node)  # type: ignore[arg-type]

    def prefilter(self, text: str) -> bool:
        return "raise" in text

    def candidate(self, node: cst.If) -> bool:
        """Static mode: a check that reads tensor values (``torch.equal`` checks are GM302's)."""
        return _candidate(node) and _equal_call(_inner_test(node)) is None

    def lower_test(self, test: cst.BaseExpression, source: SourceFile, node: cst.If) -> Union[str, tuple[str, str]]:
        """A decline reason, or the (prefix, suffix) around the condition's text (before the
        exception arguments); GM302 overrides it for ``torch.equal``."""
        if any(True for _ in iter_nodes(test, (cst.BooleanOperation,))) or any(
            isinstance(u.operator, cst.Not) for u in iter_nodes(test, (cst.UnaryOperation,))
        ):
            return "`and`/`or`/`not` inside the condition call bool() on each tensor; write it with `&`, `|`, `~`"
        for call in iter_nodes(test, (cst.Call,)):
            leaf = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
            if leaf in ("equal", "allclose", "item", "tolist", "is_nonzero", "len"):
                extra = " (GM302 lowers `torch.equal` checks)" if leaf == "equal" else ""
                return f"`{leaf}` gives a Python value, not a tensor: that call is the break{extra}"
        return (f"{B.TRAP}(", "")

    def adjust(self, edit: Edit, test: cst.BaseExpression, source: SourceFile) -> Edit:
        """A last change to the call-site edit (GM302 renames the ``torch.equal`` it wraps)."""
        return edit

    # -- the rewrite --------------------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.If)
        raise_ = _raise_of(node)
        assert raise_ is not None
        if not _body_is_only(node, raise_):
            return self.decline(source, node, "the body does more than raise; only a lone `raise` can become an assertion")
        if raise_.cause is not None:
            return self.decline(source, node, "`raise ... from ...` sets a cause the restored exception would not have")
        exc = raise_.exc
        if not (isinstance(exc, cst.Call) and isinstance(exc.func, cst.Name)):
            return self.decline(source, node, "the raise does not construct an exception `E(\"message\")`")
        name = exc.func.value
        builtin = getattr(builtins, name, None)
        if not (isinstance(builtin, type) and issubclass(builtin, Exception)) or B.module_binds(source, name):
            return self.decline(source, node, f"{name} is not a builtin exception; only builtin types can be rebuilt from the assertion's message")
        if len(exc.args) != 1 or exc.args[0].keyword is not None or exc.args[0].star:
            return self.decline(source, node, f"{name}(...) must take exactly one message argument")
        message = _literal(exc.args[0].value)
        if message is None:
            return self.decline(source, node, "the message is not a string literal (a dynamic message cannot be carried by the assertion)")
        handler = B.inside_try(source, node)
        if handler is not None:
            return self.decline(source, node, f"the check is inside the `try` at line {source.line(handler)}, whose handlers expect {name}, not the assertion's RuntimeError")
        caller_try = T.try_in_callers(source, node)
        if caller_try is not None:
            return self.decline(source, node, f"the `try` at line {source.line(caller_try)} may call this check; under compile "
                                "the assertion fails the whole graph, so its handler would not see {name}".replace("{name}", name))
        written = T.state_written_before(source, node)
        if written:
            return self.decline(source, node, written)
        if B.enclosing_function(source, node) is None:
            return self.decline(source, node, "the check runs at module level, outside any compiled region")
        test, raise_when = node.test, True
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, raise_when = test.expression, False
        lowered = self.lower_test(test, source, node)
        if isinstance(lowered, str):
            return self.decline(source, node, lowered)
        prefix, inner_suffix = lowered
        suffix = inner_suffix + f", {name}, {message!r}" + ("" if raise_when else ", False") + T.entries_argument(source, node) + ")"
        edit = B.wrap_text(source, test, prefix, suffix)
        runtime = B.runtime_edits(source, ctx)
        if isinstance(runtime, str):
            return self.decline(source, node, runtime)
        edits = (self.adjust(edit, test, source),) + runtime[0]
        notes = (
            f"Eager mode is unchanged. Under torch.compile on CPU the check is torch._assert_async in the graph and "
            f"{name}({message!r}) is raised again by the boundary; on other devices the Python branch stays."
        )
        return T.trap_fix(self.code, f"lower `raise {name}` under a tensor condition to an in-graph assertion",
                          source, node, ctx, edits, runtime[1], notes, "the branch (and its graph break)")


def _raise_of(node: cst.If) -> Optional[cst.Raise]:
    """The ``raise`` an ``if`` body holds, if its body is a raise (possibly after other statements)."""
    body = node.body
    stmts = body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()
    if not stmts:
        return None
    last = stmts[-1]
    small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else last
    if isinstance(small, cst.Raise) and small.exc is not None:
        if isinstance(node.test, cst.Call) and isinstance(node.test.func, cst.Name) and node.test.func.value == B.TRAP:
            return None  # already lowered
        if isinstance(node.test, cst.UnaryOperation) and isinstance(node.test.expression, cst.Call) and getattr(node.test.expression.func, "value", "") == B.TRAP:
            return None
        return small
    return None


def _body_is_only(node: cst.If, raise_: cst.Raise) -> bool:
    body = node.body
    if isinstance(body, cst.SimpleStatementSuite):
        return list(body.body) == [raise_]
    stmts = list(body.body)
    return len(stmts) == 1 and isinstance(stmts[0], cst.SimpleStatementLine) and list(stmts[0].body) == [raise_]


def _inner_test(node: cst.If) -> cst.BaseExpression:
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    return test


def _equal_call(test: cst.BaseExpression) -> Optional[cst.Call]:
    """``test`` when it is exactly ``torch.equal(a, b)`` with two positional arguments."""
    if (
        isinstance(test, cst.Call)
        and isinstance(test.func, cst.Attribute)
        and isinstance(test.func.value, cst.Name)
        and test.func.value.value in ("torch", "th")
        and test.func.attr.value == "equal"
        and len(test.args) == 2
        and all(a.keyword is None and not a.star for a in test.args)
    ):
        return test
    return None


def _candidate(node: cst.If) -> bool:
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    return R.lowerable_condition(test)


def _literal(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None
