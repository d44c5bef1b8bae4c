"""The classification table, on Dynamo's own gb_types and messages (torch 2.13 wording)."""

import json
from pathlib import Path

import pytest

from graphmend import rules
from graphmend.detect.classify import STMT_IF, STMT_IF_RAISE, STMT_WHILE, classify, config_setting
from graphmend.model import Category, Lever

PRINT_MSG = "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str']"
LEN_MSG = "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator `len` with argument types ['object']"
WARN_MSG = ("Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the Python builtin "
            "`_warnings.warn`.\n  Developer debug context: module: _warnings, qualname: warn, skip reason: cannot determine source file")
ITEM_MSG = ("Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Hint: Set "
            "`torch._dynamo.config.capture_scalar_outputs = True`")
EQUAL_MSG = ("Data dependent operator\n  Explanation: Operator `aten.equal.default` has a non-Tensor output whose value is "
             "dependent on the data of Tensor inputs.\n  Developer debug context: aten.equal.default")
NONZERO_MSG = ("Dynamic shape operator\n  Hint: Enable tracing of dynamic shape operators with "
               "`torch._dynamo.config.capture_dynamic_output_shape_ops = True`")


@pytest.mark.parametrize(
    "gb_type, message, statement, category, rule, lever",
    [
        ("Data-dependent branching", "", STMT_IF, Category.DATA_DEPENDENT_BRANCH, rules.GM101, Lever.RULE),
        ("Data-dependent branching", "", STMT_IF_RAISE, Category.VALIDATION, rules.GM301, Lever.RULE),
        ("Data-dependent branching", "", STMT_WHILE, Category.DATA_DEPENDENT_BRANCH, None, Lever.NONE),
        ("Failed to trace builtin operator", PRINT_MSG, None, Category.SIDE_EFFECT, rules.GM201, Lever.RULE),
        ("Failed to trace builtin operator", LEN_MSG, None, Category.UNSUPPORTED_CALL, None, Lever.NONE),
        ("logging.Logger method not supported for non-export cases", "", None, Category.SIDE_EFFECT, rules.GM202, Lever.RULE),
        ("Attempted to call function marked as skipped", WARN_MSG, None, Category.SIDE_EFFECT, rules.GM203, Lever.RULE),
        ("Attempted to call function marked as skipped", "module: os, qualname: getpid", None, Category.UNSUPPORTED_CALL, None, Lever.NONE),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", ITEM_MSG, None, Category.SCALAR, None, Lever.CONFIG),
        ("Tensor.tolist() with non-integer tensor", "Explanation: not supported", None, Category.SCALAR, None, Lever.NONE),
        ("Dynamic shape operator", NONZERO_MSG, None, Category.DYNAMIC_SHAPE, None, Lever.CONFIG),
        ("Data dependent operator", EQUAL_MSG, STMT_IF_RAISE, Category.VALIDATION, rules.GM302, Lever.RULE),
        ("Data dependent operator", EQUAL_MSG, STMT_IF, Category.DYNAMIC_SHAPE, None, Lever.NONE),
        ("Unsupported method call", "", None, Category.UNSUPPORTED_CALL, None, Lever.NONE),
        ("Assertion failed on symbolic shapes", "", None, Category.OTHER, None, Lever.NONE),
    ],
)
def test_table(gb_type, message, statement, category, rule, lever):
    c = classify(gb_type, message, statement=statement)
    assert (c.category, c.rule, c.lever) == (category, rule, lever)
    assert c.fixable == (rule is not None)
    assert c.lever_reason


def test_config_lever_names_the_setting_dynamo_names():
    assert classify("Unsupported Tensor.item() call with capture_scalar_outputs=False", ITEM_MSG).lever_reason == (
        "torch._dynamo.config.capture_scalar_outputs = True")
    assert config_setting(NONZERO_MSG) == "capture_dynamic_output_shape_ops"
    assert config_setting("nothing here") is None


def test_skipped_frame_takes_the_rule_of_its_cause():
    c = classify("graph break in loop", "Data-dependent branching\n...", statement=STMT_IF, skipped_frame=True,
                 cause_gb_type="Data-dependent branching")
    assert c.category is Category.SKIPPED_FRAME and c.rule == rules.GM101 and c.fixable
    c = classify("Dynamo recompile limit exceeded", "", skipped_frame=True)
    assert c.category is Category.SKIPPED_FRAME and c.rule is None and not c.fixable


def test_every_gb_type_named_in_the_table_is_in_torchs_registry():
    """The table's gb_types are spelled exactly as the installed torch's registry spells them."""
    import importlib.util

    import graphmend.detect.classify as module

    spec = importlib.util.find_spec("torch")
    registry = json.loads((Path(spec.origin).parent / "_dynamo" / "graph_break_registry.json").read_text())
    known = {entry["Gb_type"] for entries in registry.values() for entry in entries}
    named = module._DATA_DEPENDENT | module._DYNAMIC_SHAPE | module._LOGGING
    assert named <= known, named - known


def test_rules_table_is_consistent():
    assert [r.code for r in rules.RULES] == sorted(r.code for r in rules.RULES)
    assert rules.RULES_BY_CODE[rules.GM301].category is Category.VALIDATION
