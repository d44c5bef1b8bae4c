"""GM102 early-return-on-tensor-condition: declines, routing, and a differential test.

The differential test generates early exits (the condition, the early value, setup statements in
the rest, the rest's value) and compares the original with the rewrite on inputs that take both
outcomes: values, dtypes, shapes and gradients, eager and under torch.compile(backend="eager",
fullgraph=True) — one graph, no break. A gradient the
original leaves None (the input is read only on the path not taken) compares as zeros.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from graphmend.model import Category, Decline, Fix, GraphBreak, Safety
from graphmend.transforms.base import RuleContext, SourceFile
from graphmend.transforms.engine import fix_text, route_breaks
from graphmend.transforms.registry import all_rules, get_rule
from tests.transforms._side_effect_support import load_module

RULE = get_rule("GM102")
UNSAFE = RuleContext(threshold=Safety.UNSAFE)


def _one(text: str, ctx: RuleContext = UNSAFE):
    outcomes = RULE.run(SourceFile("prog.py", text), ctx, None)
    assert len(outcomes) == 1, outcomes
    return outcomes[0]


def _func(body: str) -> str:
    return "import torch\n\n\ndef f(x, y):\n" + textwrap.indent(textwrap.dedent(body), "    ")


@pytest.mark.parametrize("body,reason", [
    ("if x.sum() > 0:\n    return x\nprint('negative')\nreturn -x\n", "print"),
    ("if x.sum() > 0:\n    return x\ny.add_(1)\nreturn x - y\n", "add_"),
    ("if x.sum() > 0:\n    return x\nz = x * 2\n", "as `if`/`else`"),
    ("if x.sum() > 0:\n    return x\nself_state = torch.rand_like(x)\nreturn x + self_state\n", "as `if`/`else`"),
])
def test_declines_with_gm101s_reason(body, reason):
    outcome = _one(_func(body))
    assert isinstance(outcome, Decline), outcome
    assert outcome.reason.startswith("as `if`/`else`") and reason in outcome.reason, outcome.reason


def test_nothing_after_the_if_is_declined():
    outcome = _one(_func("z = x * 2\nif x.sum() > 0:\n    return z\n"))
    assert isinstance(outcome, Decline) and "nothing follows" in outcome.reason


def test_not_a_site_for_gm101s_own_shapes():
    for body in ("if x.sum() > 0:\n    return x\nreturn -x\n",
                 "if x.sum() > 0:\n    return x\nelse:\n    z = -x\n    return z\n",
                 "if x.sum() > 0:\n    x = x * 2\nz = x + 1\nreturn z\n"):
        assert RULE.run(SourceFile("prog.py", _func(body)), UNSAFE, None) == []


def test_names_bound_again_are_renamed_not_hoisted_over_reads():
    text = _func("if x.sum() > 0:\n    return x\nx = x * 2\ny = y + x\nreturn y.sum() + x\n")
    result = fix_text("prog.py", text, UNSAFE, [RULE])
    assert result.text.endswith("    x_1 = x * 2\n    y_1 = y + x_1\n    return _graphmend_select(x.sum() > 0, x, y_1.sum() + x_1)\n")
    assert "x → x_1" in result.applied[0].notes


def test_no_renaming_where_names_are_seen_by_scope():
    text = _func("if x.sum() > 0:\n    return x\nx = x * 2\ng = lambda: x\nreturn g()\n")
    outcome = _one(text)
    assert isinstance(outcome, Decline)  # left as written: GM101 refuses the rebinding and the call


def test_setup_that_may_raise_makes_it_unsafe():
    fix = _one(_func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h.abs() * y\nreturn z - 1\n"),
               RuleContext(verified=True))
    assert isinstance(fix, Fix) and fix.safety is Safety.UNSAFE and "may raise" in fix.notes


def test_dynamic_mode_gets_gm101s_breaks_and_fixes_them():
    text = _func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h.abs() * 3\nreturn z - 1\n")
    brk = GraphBreak(file="prog.py", line=6, reason="Data-dependent branching", category=Category.DATA_DEPENDENT_BRANCH,
                     gb_type="Data-dependent branching", fixable=True, rule="GM101")
    routed = route_breaks([brk], all_rules())
    assert routed["GM101"] == {6} and routed["GM102"] == {6}
    result = fix_text("prog.py", text, RuleContext(file="prog.py", verified=True), all_rules(), routed)
    assert [(f.rule, f.safety) for f in result.applied] == [("GM102", Safety.SAFE)]
    assert "return _graphmend_select(h.sum() > 0, h + 1, z - 1)" in result.text
    assert [d.rule for d in result.declined] == ["GM101"]  # GM101's own shape check: the lone return


# -- differential ------------------------------------------------------------------------------

PREDICATES = ["x.sum() > 0", "(x > 0).all()", "(x > y).any()", "x.amax() > 0.5"]
EARLY = ["x * 2", "x + y", "torch.tanh(x)", "x.abs()"]
# Rebinding a parameter (x) or a name twice (z) in the rest: renamed, never hoisted over a read.
SETUPS = ["z = x * y", "z = torch.sigmoid(x)", "x = x - 1\n    z = x * y", "z = torch.maximum(x, y)",
          "y = torch.tanh(x)\n    x = y * 2\n    z = x + y"]
RESTS = ["z + 1", "z * x", "z - y", "torch.relu(z)"]
TEMPLATE = """import torch


def f(x, y):
    w = x * 0.5
    if {p}:
        return {a}
    {s}
    z = z + w
    return {r}
"""


def _run(fn, x, y):
    x, y = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    out = fn(x, y)
    out.sum().backward()
    # Both values are computed after the rewrite: an input only the untaken one reads gets a zero
    # gradient where the original left it None (the same numbers to an optimiser).
    return [out.detach()] + [t.grad if t.grad is not None else torch.zeros_like(t) for t in (x, y)]


@settings(max_examples=6, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate))
@given(p=st.sampled_from(PREDICATES), a=st.sampled_from(EARLY), s=st.sampled_from(SETUPS), r=st.sampled_from(RESTS),
       data=st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=6, max_size=6))
def test_differential_both_outcomes(tmp_path_factory, p, a, s, r, data):
    text = TEMPLATE.format(p=p, a=a, s=s, r=r)
    # (unsafe allowed: a setup such as `x * y` may raise for shapes the source does not show)
    result = fix_text("prog.py", text, RuleContext(file="prog.py", verified=True, threshold=Safety.UNSAFE), [RULE],
                      {"GM102": {6}})
    (fix,) = result.applied
    assert isinstance(fix, Fix) and "if " + p not in result.text
    tmp = tmp_path_factory.mktemp("gm102")
    original, fixed = load_module(tmp, text, "orig").f, load_module(tmp, result.text, "fixed").f
    x = torch.tensor(data[:3])
    y = torch.tensor(data[3:])
    for xs in (x, -x.abs() - 1, x.abs() + 1):  # both outcomes of every predicate
        want = _run(original, xs, y)
        torch._dynamo.reset()
        for arm in (fixed, torch.compile(fixed, backend="eager", fullgraph=True)):
            got = _run(arm, xs, y)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_check_labels_the_early_return_fixable_by_gm102(tmp_path):
    """A label is a promise: `check` asks the rules through the fix loop's own path, so the break
    GM101 declines (a return inside an `if` without `else`) is labelled fixable by GM102."""
    from graphmend.check import label_breaks
    from graphmend.config import parse_config
    from graphmend.model import Lever

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(_func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h.abs() * 3\nreturn z - 1\n"))
    brk = GraphBreak(file="pkg/m.py", line=6, reason="Data-dependent branching", category=Category.DATA_DEPENDENT_BRANCH,
                     gb_type="Data-dependent branching", fixable=True, rule="GM101", lever=Lever.RULE, verified=True)
    (label,) = label_breaks(parse_config({"paths": ["pkg/"]}, root=tmp_path), [brk], verified=True)
    assert (label.fixable, label.rule, label.lever) == (True, "GM102", Lever.RULE)
    assert "GM102 rewrites this site exactly" in label.lever_reason
