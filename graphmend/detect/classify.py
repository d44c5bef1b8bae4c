"""One table from a Dynamo graph break to a GraphMend category, rule and lever.

Dynamo names each break with a short ``gb_type`` (the key of
``torch/_dynamo/graph_break_registry.json``) and a message with an *Explanation* and *Hints*.
The gb_type alone is too coarse for some categories (``print`` and ``len`` on an
unsupported argument share "Failed to trace builtin operator"; ``warnings.warn`` is one of
many "function marked as skipped"), so the table also reads the callee out of the message,
and, for data-dependent branches, what the ``if`` guards (a ``raise`` makes it a validation).

Pure and torch-free: it is called in the parent process and by static detection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from graphmend import rules
from graphmend.model import Category, Lever

# Statement shapes at a break site (found by reading the source at the reported line).
STMT_IF = "if"  # an `if` (or a conditional expression) on a tensor
STMT_IF_RAISE = "if-raise"  # an `if` whose body is only a `raise`
STMT_WHILE = "while"
STMT_ASSERT = "assert"
STMT_IFEXP = "ifexp"  # a conditional expression (`a if t > 0 else b`) on a tensor

# Dynamo's compile settings that can remove a break, as its own hints name them.
CONFIG_SETTINGS = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")

_DATA_DEPENDENT = {
    "Data-dependent branching",
    "Data-dependent branching with non-constant __bool__",
    "Data-dependent assertion failed (cannot compile partial graph)",
}
_DYNAMIC_SHAPE = {
    "Dynamic shape operator",
    "Dynamic shape operator (no meta kernel)",
    "Data dependent operator",
    "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape",
}
_SCALAR_PREFIXES = ("Unsupported Tensor.item()", "Tensor.tolist()", "Unsupported Tensor.tolist()")
_LOGGING = {"logging.Logger method not supported for non-export cases"}
_CALL_WORDS = ("call", "function", "method", "builtin", "inline", "skipped")

_EQUAL_RE = re.compile(r"aten\.equal\b")
_PRINT_RE = re.compile(r"builtin operator `print`")
_WARN_RE = re.compile(r"`_?warnings\.warn(?:_explicit)?`|module: _?warnings, qualname: warn")
_LOGGING_CALLEE_RE = re.compile(r"`logging\.|module: logging\b")


@dataclass(frozen=True)
class Classification:
    category: Category
    fixable: bool
    rule: Optional[str]
    lever: Lever
    lever_reason: str


def classify(
    gb_type: Optional[str],
    reason: str = "",
    *,
    statement: Optional[str] = None,
    skipped_frame: bool = False,
    cause_gb_type: Optional[str] = None,
) -> Classification:
    """Classify one break.

    ``reason`` is Dynamo's message (explanation and hints); ``statement`` the shape of the
    statement at the site (``STMT_*``) when known. A skipped frame is its own category; its
    rule is the one that would remove the break that made Dynamo give up on the frame
    (``cause_gb_type``), since fixing that break keeps the frame compiled.
    """
    if skipped_frame:
        cause = classify(cause_gb_type or gb_type, reason, statement=statement)
        if cause.rule:
            why = f"fixing the {cause.category.value} break that made Dynamo skip the frame ({cause.rule}) keeps it compiled"
        else:
            why = "Dynamo ran the whole function eagerly; " + cause.lever_reason
        return Classification(Category.SKIPPED_FRAME, cause.fixable, cause.rule, cause.lever, why)

    gb = gb_type or ""
    if gb in _DATA_DEPENDENT:
        if statement == STMT_IF_RAISE:
            return _rule(Category.VALIDATION, rules.GM301, "the raise can become an in-graph torch._assert_async")
        if statement == STMT_IFEXP:
            return _rule(Category.DATA_DEPENDENT_BRANCH, rules.GM402, "both values can be computed and one selected with torch.where")
        if statement in (None, STMT_IF):
            return _rule(Category.DATA_DEPENDENT_BRANCH, rules.GM101, "both arms can be computed and one selected with torch.where")
        return _none(Category.DATA_DEPENDENT_BRANCH, f"a data-dependent `{statement}` has no branch-free form GraphMend can prove")

    if gb in _LOGGING or (_LOGGING_CALLEE_RE.search(reason) and "skipped" in gb):
        return _rule(Category.SIDE_EFFECT, rules.GM202, "the logging call can be deferred out of the compiled region")
    if _PRINT_RE.search(reason):
        return _rule(Category.SIDE_EFFECT, rules.GM201, "the print can be deferred out of the compiled region")
    if _WARN_RE.search(reason):
        return _rule(Category.SIDE_EFFECT, rules.GM203, "the warning can be deferred out of the compiled region")

    if gb.startswith(_SCALAR_PREFIXES):
        return _lever_or_none(Category.SCALAR, reason, "a Python scalar read from a tensor; no source rule yet")
    if gb in _DYNAMIC_SHAPE and _EQUAL_RE.search(reason) and statement == STMT_IF_RAISE:
        # `if not torch.equal(a, b): raise ...`: Dynamo reports aten.equal as a data-dependent
        # operator, but as a guard it lowers like any other trap.
        return _rule(Category.VALIDATION, rules.GM302, "the torch.equal guard can become a shape check plus an in-graph assertion")
    if gb in _DYNAMIC_SHAPE:
        return _lever_or_none(Category.DYNAMIC_SHAPE, reason, "the output shape depends on tensor data; no source rule yet")
    low = gb.lower()
    if any(word in low for word in _CALL_WORDS):
        return _none(Category.UNSUPPORTED_CALL, "Dynamo cannot trace this call; move it out of the compiled region")
    return _none(Category.OTHER, "no GraphMend rule or compile setting is known to remove this break")


def config_setting(reason: str) -> Optional[str]:
    """The Dynamo setting Dynamo's own message says would remove the break, if any."""
    for setting in CONFIG_SETTINGS:
        if setting in reason:
            return setting
    return None


def _rule(category: Category, code: str, why: str) -> Classification:
    return Classification(category, True, code, Lever.RULE, why)


def _none(category: Category, why: str) -> Classification:
    return Classification(category, False, None, Lever.NONE, why)


def _lever_or_none(category: Category, reason: str, otherwise: str) -> Classification:
    setting = config_setting(reason)
    if setting:
        return Classification(category, False, None, Lever.CONFIG, f"torch._dynamo.config.{setting} = True")
    return _none(category, otherwise)
