"""GraphMend's rule codes: the one place they are spelled (DESIGN.md, "Rule codes").

Ranges: ``GM1xx`` predicated control flow, ``GM2xx`` deferred side effects, ``GM3xx`` trap
lowering, ``GM4xx`` scalar / ``.item()`` patterns, ``GM5xx`` compile-configuration levers,
``GM9xx`` detection-only notes. The transforms registry links each code to its transform;
detection only needs to know which code *could* fix a break.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmend.model import Category

GM101 = "GM101"  # data-dependent branch -> torch.where
GM201 = "GM201"  # print in a compiled region -> deferred
GM202 = "GM202"  # logging / logger.* (warning_once included) -> deferred
GM203 = "GM203"  # warnings.warn -> deferred
GM301 = "GM301"  # raise under a tensor condition -> torch._assert_async
GM302 = "GM302"  # `if not torch.equal(a, b): raise` -> shape check + in-graph (a == b).all() assertion
GM401 = "GM401"  # .item()/float()/int() only used in tensor arithmetic -> 0-d tensor
GM402 = "GM402"  # `a if <tensor> else b` -> torch.where
GM501 = "GM501"  # Tensor.item() used as a number -> capture_scalar_outputs around every call
GM502 = "GM502"  # nonzero/unique/boolean masks -> capture_dynamic_output_shape_ops around every call

# The compile setting each GM5xx lever proposes (Dynamo's own hint names the setting).
CONFIG_RULES: dict[str, str] = {
    "capture_scalar_outputs": GM501,
    "capture_dynamic_output_shape_ops": GM502,
}


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str  # named after the pattern it flags, as ruff does
    category: Category


RULES: tuple[RuleInfo, ...] = (
    RuleInfo(GM101, "data-dependent-branch", Category.DATA_DEPENDENT_BRANCH),
    RuleInfo(GM201, "print-in-compiled-region", Category.SIDE_EFFECT),
    RuleInfo(GM202, "logging-in-compiled-region", Category.SIDE_EFFECT),
    RuleInfo(GM203, "warning-in-compiled-region", Category.SIDE_EFFECT),
    RuleInfo(GM301, "raise-under-tensor-condition", Category.VALIDATION),
    RuleInfo(GM302, "tensor-equal-guard", Category.VALIDATION),
    RuleInfo(GM401, "scalar-item-in-tensor-arithmetic", Category.SCALAR),
    RuleInfo(GM402, "conditional-expression-on-tensor", Category.DATA_DEPENDENT_BRANCH),
    RuleInfo(GM501, "compile-config-capture-scalar-outputs", Category.SCALAR),
    RuleInfo(GM502, "compile-config-capture-dynamic-output-shape-ops", Category.DYNAMIC_SHAPE),
)

RULES_BY_CODE: dict[str, RuleInfo] = {r.code: r for r in RULES}
