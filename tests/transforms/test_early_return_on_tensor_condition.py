"""GM102 early-return-on-tensor-condition: declines, routing, and a differential test.

The differential test generates early exits (the condition, the early value, setup statements in
the rest, the rest's value) and compares the original with the rewrite on inputs that take both
outcomes: values, dtypes, shapes and gradients (None where the original gives none), eager and under
torch.compile(backend="eager", fullgraph=True) — one graph, no break. With autograd on, GM101's
legality declines the programs whose two values draw gradients from different inputs; the test
checks that each such decline is right (the original's gradients flow to different inputs on the
two paths) and that a good share of the generated programs is fixed.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from hypothesis import Phase, example, given, settings
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
    # (the early value is a new tensor, `x * 2`: returning the caller's own `x` is declined for itself)
    ("if x.sum() > 0:\n    return x * 2\nprint('negative')\nreturn -x\n", "print"),
    ("if x.sum() > 0:\n    return x * 2\ny.add_(1)\nreturn x - y\n", "add_"),
    ("if x.sum() > 0:\n    return x * 2\nz = x * 2\n", "`return` inside only some branches"),
    ("if x.sum() > 0:\n    return x * 2\nself_state = torch.rand_like(x)\nreturn x + self_state\n", "random"),
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
    # The early value reads both names the rest binds again (and draws gradients from both, as the rest does).
    text = _func("if x.sum() > 0:\n    return x + y\nx = x * 2\ny = y + x\nreturn y.sum() + x\n")
    result = fix_text("prog.py", text, UNSAFE, [RULE])
    # the select on ordinary strided tensors; the early return and the rest as written after it
    assert ("    if _graphmend_strided(x, y):\n        x_1 = x * 2\n        y_1 = y + x_1\n"
            "        return _graphmend_select(x.sum() > 0, x + y, y_1.sum() + x_1)\n"
            "    elif x.sum() > 0:\n") in result.text, result.declined
    assert "x → x_1, y → y_1" in result.applied[0].notes


def test_no_renaming_where_names_are_seen_by_scope():
    text = _func("if x.sum() > 0:\n    return x * 2\nx = x * 2\ng = lambda: x\nreturn g()\n")
    outcome = _one(text)
    # left as written (no `x_1`): GM101 refuses the rebinding of a name the early value reads
    assert isinstance(outcome, Decline) and "`x` is read before it is assigned" in outcome.reason, outcome


def test_setup_that_may_raise_makes_it_unsafe():
    # Under no_grad: `h + 1` and `z - 1` (from `h` and `y`) may differ for autograd, which is not the point here.
    text = _func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h.abs() * y\nreturn z - 1\n").replace(
        "def f", "@torch.no_grad()\ndef f")
    fix = _one(text, RuleContext(verified=True))
    assert isinstance(fix, Fix) and fix.safety is Safety.UNSAFE, fix
    # (`h.abs()` raises for a bool tensor, `* y` for shapes that do not broadcast: either is named)
    assert "the setup `h.abs()" in fix.notes and "now runs on both paths and may raise" in fix.notes, fix.notes


def test_dynamic_mode_gets_gm101s_breaks_and_fixes_them():
    text = _func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h * 3\nreturn z - 1\n")
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
# New tensors (never the caller's own), drawing gradients from x (through w) or from x and y.
EARLY = ["x * 2 + w", "x + y + w", "torch.tanh(x) * w", "(x - y).abs() + w"]
# Rebinding a parameter (x) or a name twice (z) in the rest: renamed, never hoisted over a read.
SETUPS = ["z = x * y", "z = torch.sigmoid(x)", "x = x - 1\n    z = x * y", "z = torch.maximum(x, y)",
          "y = torch.tanh(x)\n    x = y * 2\n    z = x + y"]
RESTS = ["z + 1", "z * x", "z - y", "torch.relu(z)"]
TEMPLATE = """import torch


{d}def f(x, y):
    w = x * 0.5
    if {p}:
        return {a}
    {s}
    z = z + w
    return {r}
"""
GRAD_REASON = "the branches' values may not both require grad, or not from the same tensors"


def _run(fn, x, y, grad):
    """The value, and with autograd on each input's gradient (None where none flows to it)."""
    x, y = x.clone().requires_grad_(grad), y.clone().requires_grad_(grad)
    out = fn(x, y)
    if grad:
        out.sum().backward()
    return [out.detach(), out.requires_grad, x.grad, y.grad]


def _same(got, want):
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor) and g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        else:
            assert g == w  # requires_grad, or a gradient None on both sides


@example(p="x.sum() > 0", a="x + y + w", s="z = torch.maximum(x, y)", r="z - y", grad=True, data=[0.5, -1.0, 2.0, 1.0, 0.0, -2.0])
@example(p="x.sum() > 0", a="x * 2 + w", s="z = torch.sigmoid(x)", r="z * x", grad=True, data=[0.5, -1.0, 2.0, 1.0, 0.0, -2.0])
@example(p="(x > y).any()", a="x * 2 + w", s="z = x * y", r="z - y", grad=True, data=[0.5, -1.0, 2.0, 1.0, 0.0, -2.0])
@settings(max_examples=8, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate))
@given(p=st.sampled_from(PREDICATES), a=st.sampled_from(EARLY), s=st.sampled_from(SETUPS), r=st.sampled_from(RESTS),
       grad=st.booleans(), data=st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=6, max_size=6))
def _differential_case(tmp, outcomes, p, a, s, r, grad, data):
    text = TEMPLATE.format(d="" if grad else "@torch.no_grad()\n", p=p, a=a, s=s, r=r)
    line = text.splitlines().index(f"    if {p}:") + 1
    # (unsafe allowed: a setup such as `x * y` may raise for shapes the source does not show)
    result = fix_text("prog.py", text, RuleContext(file="prog.py", verified=True, threshold=Safety.UNSAFE), [RULE],
                      {"GM102": {line}})
    original = load_module(tmp, text, f"orig{len(outcomes)}").f
    x = torch.tensor(data[:3])
    y = torch.tensor(data[3:])
    inputs = (x, -x.abs() - 3, x.abs() + 3)  # both outcomes of every predicate (y lies in [-2, 2])
    if not result.applied:
        # Declined only for autograd (no_grad makes every generated program fixable), and rightly:
        # an argument may hold -inf/NaN, and a product or `tanh`/`sigmoid` of it in the value not
        # taken back-propagates 0 * inf = NaN; or the original gives gradients to different
        # inputs on the two paths, where torch.where's result would give every input of either
        # value one.
        (decline,) = result.declined
        assert result.text == text
        if grad and "inf/NaN" in decline.reason:
            outcomes.append((grad, False))
            return
        assert grad and GRAD_REASON in decline.reason, decline.reason
        flows = {tuple(g is not None for g in _run(original, xs, y, grad)[2:]) for xs in inputs}
        assert len(flows) == 2, flows
        outcomes.append((grad, False))
        return
    (fix,) = result.applied
    # the original test stays only as the layout guard's `elif`
    assert isinstance(fix, Fix) and "    if " + p not in result.text and "    elif " + p + ":" in result.text
    outcomes.append((grad, True))
    fixed = load_module(tmp, result.text, f"fixed{len(outcomes)}").f
    for xs in inputs:
        want = _run(original, xs, y, grad)
        torch._dynamo.reset()
        for arm in (fixed, torch.compile(fixed, backend="eager", fullgraph=True)):
            _same(_run(arm, xs, y, grad), want)


def test_differential_both_outcomes(tmp_path):
    outcomes: list[tuple[bool, bool]] = []
    _differential_case(tmp_path, outcomes)
    fixed_with_grad = sum(1 for grad, fixed in outcomes if grad and fixed)
    # A good share is fixed (every no_grad program, about half of those with autograd on), not all declined.
    assert sum(fixed for _, fixed in outcomes) * 2 >= len(outcomes) and fixed_with_grad >= 1, outcomes


def test_check_labels_the_early_return_fixable_by_gm102(tmp_path):
    """A label is a promise: `check` asks the rules through the fix loop's own path, so the break
    GM101 declines (a return inside an `if` without `else`) is labelled fixable by GM102."""
    from graphmend.check import label_breaks
    from graphmend.config import parse_config
    from graphmend.model import Lever

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(_func("h = x * 2\nif h.sum() > 0:\n    return h + 1\nz = h * 3\nreturn z - 1\n"))
    brk = GraphBreak(file="pkg/m.py", line=6, reason="Data-dependent branching", category=Category.DATA_DEPENDENT_BRANCH,
                     gb_type="Data-dependent branching", fixable=True, rule="GM101", lever=Lever.RULE, verified=True)
    (label,) = label_breaks(parse_config({"paths": ["pkg/"]}, root=tmp_path), [brk], verified=True)
    assert (label.fixable, label.rule, label.lever) == (True, "GM102", Lever.RULE)
    assert "GM102 rewrites this site exactly" in label.lever_reason
