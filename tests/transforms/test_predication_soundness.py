"""GM101/GM402 soundness: each program here was rewritten by a SAFE fix that changed what it does.

Every case is a small module run before and after ``graphmend fix`` (the real rules, at the
default ``safe`` threshold), eagerly and under ``torch.compile`` (``eager`` backend). Observed:
the returned values, whether each result requires grad and is the caller's own object (or a
Parameter), every leaf's gradient after ``backward`` (None and a zero tensor differ), and the
exception type and message. A rule must either keep all of that or decline with a reason.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.conditional_expression_on_tensor import ConditionalExpressionOnTensor
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text
from tests.transforms._side_effect_support import load_module, reset_dynamo

RULES = [DataDependentBranch(), ConditionalExpressionOnTensor()]
HEADER = "import torch\nfrom torch import nn\n\n\n"


def _fix(body: str, *, dynamic: bool = False):
    text = HEADER + textwrap.dedent(body).lstrip("\n")
    lines = None
    if dynamic:  # Dynamo reports the line of each `if` / conditional expression
        found = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ") or " if " in line]
        lines = {"GM101": found, "GM402": found}
    return text, fix_text("m.py", text, RuleContext(threshold=Safety.SAFE, verified=dynamic), RULES, lines)


def _observe(fn, args):
    """What a caller can see of one call: values, requires_grad, identity, grads, exception."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad] + [
        p for a in args if isinstance(a, nn.Module) for p in a.parameters()]
    seen: dict = {}
    try:
        out = fn(*args)
    except Exception as error:  # noqa: BLE001 - compared with the original's
        return {"error": (RuntimeError if isinstance(error, RuntimeError) else type(error), str(error).splitlines()[0])}
    outs = out if isinstance(out, tuple) else (out,)
    seen["values"] = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs]
    seen["types"] = [type(o).__name__ for o in outs]
    seen["requires_grad"] = [getattr(o, "requires_grad", None) for o in outs]
    seen["identity"] = [[o is a for a in args] for o in outs]
    grads = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if grads:
        sum(g.float().sum() for g in grads).backward()
    seen["grads"] = [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]
    return seen


def _same(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), (what, a, b)
    if "error" in a:
        assert a["error"] == b["error"], what
        return
    for key in ("types", "requires_grad", "identity"):
        assert a[key] == b[key], (what, key, a[key], b[key])
    for x, y in zip(a["values"], b["values"]):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(y, x, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: value {m}")
        else:
            assert x == y, what
    for x, y in zip(a["grads"], b["grads"]):
        assert (x is None) == (y is None), (what, "grad", x, y)
        if x is not None:
            torch.testing.assert_close(y, x, rtol=0, atol=0, equal_nan=False, msg=lambda m: f"{what}: grad {m}")


def _behaves_the_same(tmp_path, text: str, new: str, entry: str, cases) -> None:
    before, after = load_module(tmp_path, text), load_module(tmp_path, new)
    for make_args in cases:
        for compiled in (False, True):
            reset_dynamo()
            fa, fb = getattr(before, entry), getattr(after, entry)
            if compiled:
                fa, fb = torch.compile(fa, backend="eager"), torch.compile(fb, backend="eager")
            _same(_observe(fa, make_args(before)), _observe(fb, make_args(after)), f"{'compiled' if compiled else 'eager'}\n{new}")


def _declined(result, *pieces: str) -> None:
    assert result.text == result.original, result.text
    reasons = " | ".join(d.reason for d in result.declined)
    assert all(p in reasons for p in pieces), reasons


# -- 1. requires_grad and gradients of the arm not taken -------------------------------------

GRAD_ARMS = """
def f(x, t):
    if x.sum() > 0:
        y = x * 2
    else:
        y = t * 3
    return y
"""


def _x_plain_t_grad(m):
    return torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0], requires_grad=True)


def test_requires_grad_of_the_unselected_arm_is_declined(tmp_path):
    text, result = _fix(GRAD_ARMS)
    _behaves_the_same(tmp_path, text, result.text, "f", [_x_plain_t_grad])
    _declined(result, "require grad")


def test_two_parameters_selected_by_a_conditional_expression_are_declined(tmp_path):
    # `where` would give the parameter not chosen a zero gradient instead of None (AdamW then
    # still decays it and moves its moments).
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Parameter(torch.ones(2))
            self.down = nn.Parameter(torch.full((2,), 0.5))

        def forward(self, gate):
            scale = self.up if gate.mean() > 0 else self.down
            return gate * scale


    def f(m, gate):
        return m(gate)
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (m.M(), torch.ones(2))])
    _declined(result, "require grad")


def test_arms_with_the_same_gradient_sources_are_still_fixed(tmp_path):
    body = """
    def f(x):
        if x.sum() > 0:
            y = x.clamp(max=1.0)
        else:
            y = x * 2
        return y
    """
    text, result = _fix(body)
    assert "torch.where" in result.text or "_graphmend_select" in result.text
    cases = [lambda m: (torch.tensor([1.5, 2.0], requires_grad=True),), lambda m: (torch.tensor([-1.5, 0.5], requires_grad=True),)]
    _behaves_the_same(tmp_path, text, result.text, "f", cases)


def test_arms_under_no_grad_are_fixed(tmp_path):
    body = """
    @torch.no_grad()
    def f(x, t):
        if x.sum() > 0:
            y = x * 2
        else:
            y = t * 3
        return y
    """
    text, result = _fix(body)
    assert result.text != text
    _behaves_the_same(tmp_path, text, result.text, "f", [_x_plain_t_grad])


# -- 2. the selected arm is the caller's own object ------------------------------------------

@pytest.mark.parametrize("arm", ["x", "x.detach()", "x.contiguous()", "x.float()", "x.to(torch.float32)"])
def test_returning_the_callers_tensor_is_declined(tmp_path, arm):
    body = f"""
    def f(x):
        if x.sum() > 0:
            return {arm}
        return x + 1
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),)])
    _declined(result, "the caller")


def test_conditional_expression_returning_a_parameter_is_declined(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(2))

        def forward(self, gate):
            return self.weight if gate.sum() > 0 else self.weight * 2


    def f(m, gate):
        return m(gate)
    """
    text, result = _fix(body)
    assert result.text == text, result.text
    reasons = " | ".join(d.reason for d in result.declined)
    assert "the caller" in reasons, reasons
    module = load_module(tmp_path, text).M()
    assert isinstance(module(torch.ones(2)), nn.Parameter)  # what a rewrite would have lost


def test_a_selected_value_used_only_inside_is_still_fixed(tmp_path):
    body = """
    def f(x):
        y = x if x.sum() > 0 else x * 2
        return y + 1
    """
    text, result = _fix(body)
    assert result.text != text
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0], requires_grad=True),),
                                                          lambda m: (torch.tensor([-1.0, 0.0], requires_grad=True),)])


# -- 3. an arm not taken that overflows --------------------------------------------------------

def test_an_overflowing_product_in_the_unselected_arm_is_declined(tmp_path):
    body = """
    def f(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = (x * 1e30) * x
        return y
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1e10, 2.0], requires_grad=True),)])
    _declined(result, "inf/NaN")


# the square of a plain argument in the arm an input with -inf in it does not take
PLAIN_PRODUCT = """
    def f(x):
        if x.sum() > 0:
            y = x * x
        else:
            y = x * 2
        return y
    """


def test_a_product_of_plain_arguments_is_declined_where_gradients_flow(tmp_path):
    """An argument may hold -inf (a masked score): `x * x` not taken back-propagates 0 * -inf."""
    text, result = _fix(PLAIN_PRODUCT)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([float("-inf"), 2.0], requires_grad=True),)])
    _declined(result, "inf/NaN")


def test_a_product_of_plain_tensors_is_still_fixed_without_gradients(tmp_path):
    text, result = _fix("\n    @torch.no_grad()" + PLAIN_PRODUCT)
    assert result.text != text
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),),
                                                          lambda m: (torch.tensor([float("-inf"), 2.0]),)])


# -- 5. a condition with more than one element -------------------------------------------------

@pytest.mark.parametrize("values", [[1.0, 2.0], [], [3.0], [-3.0]])
def test_a_non_scalar_condition_raises_as_the_if_did(tmp_path, values):
    body = """
    def f(x):
        if x > 0:
            y = x * 2
        else:
            y = x + 1
        return y
    """
    text, result = _fix(body, dynamic=True)
    assert result.text != text, [d.reason for d in result.declined]
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor(values),)])


def test_a_non_scalar_conditional_expression_raises_as_the_expression_did(tmp_path):
    body = """
    def f(x):
        return x * 2 if x > 0 else x + 1
    """
    text, result = _fix(body, dynamic=True)
    assert result.text != text, [d.reason for d in result.declined]
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),), lambda m: (torch.tensor([2.0]),)])


# -- 6. values that are not tensors of one shape and dtype ---------------------------------------

def test_a_python_number_kept_on_one_path_stays_a_number(tmp_path):
    body = """
    def f(x, s):
        if x.sum() > 0:
            s = s * 2
        return x * 1, s
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]), 1.5),
                                                          lambda m: (torch.tensor([-1.0, -2.0]), 1.5)])


@pytest.mark.parametrize("arms", [("x * 2", "x.long()"), ("x * 2", "x[0]"), ("x.int() + 1", "x * 2.5"),
                                  ("(x, x * 2)", "(x * 3, x)")])
def test_arms_of_other_dtypes_or_shapes_are_selected_as_the_if_did(tmp_path, arms):
    body = f"""
    @torch.no_grad()
    def f(x):
        y = {arms[0]} if x.sum() > 0 else {arms[1]}
        return y if isinstance(y, tuple) else (y,)
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),),
                                                          lambda m: (torch.tensor([-1.0, -2.0]),)])


# -- 4. sparse tensors: tests/transforms/test_predication_sparse.py -----------------------------


def test_registered_buffers_never_require_grad_so_selecting_them_is_fixed(tmp_path):
    # The long-context rotary table of examples/ decoder.py: two buffers, chosen by a 0-d test.
    body = """
    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("short_inv_freq", torch.ones(4), persistent=False)
            self.register_buffer("long_inv_freq", torch.full((4,), 0.25), persistent=False)

        def forward(self, position_ids):
            if position_ids.max() + 1 > 8:
                inv_freq = self.long_inv_freq
            else:
                inv_freq = self.short_inv_freq
            return position_ids[..., None].float() * inv_freq


    def f(m, position_ids):
        return m(position_ids)
    """
    text, result = _fix(body)
    assert result.text != text, [d.reason for d in result.declined]
    cases = [lambda m: (m.Rotary(), torch.arange(4)), lambda m: (m.Rotary(), torch.arange(12))]
    _behaves_the_same(tmp_path, text, result.text, "f", cases)
    # a "buffer" also assigned as an attribute may be anything: declined
    rebound = body.replace("        def forward(self, position_ids):\n",
                           "        def reset(self, t):\n            self.long_inv_freq = t\n\n        def forward(self, position_ids):\n")
    _, result = _fix(rebound)
    _declined(result, "`self.long_inv_freq`")


def test_a_non_scalar_condition_after_and_is_unsafe():
    # `a and b`: the original never asks for b's truth value when a is false; `a & b` does.
    text = HEADER + "def f(x, y):\n    h = x + 1\n    if (h > 0).any() and torch.gt(y, 0):\n        h = h * 2\n    return h\n"
    source_fix = fix_text("m.py", text, RuleContext(threshold=Safety.UNSAFE), RULES)
    (fix,) = source_fix.applied
    assert fix.safety is Safety.UNSAFE and "ambiguous" in fix.notes
    assert fix_text("m.py", text, RuleContext(threshold=Safety.SAFE), RULES).text == text


# -- 7. the same call in both branches, one of them given the caller's own tensor ------------------

@pytest.mark.parametrize("call, use", [("saved.append({})", "saved[0]"), ("saved.setdefault('k', {})", "saved['k']"),
                                       ("saved.extend(tuple({}))", "saved[0]")])
def test_a_call_that_keeps_the_callers_tensor_is_declined(tmp_path, call, use):
    # The original hands `x` itself to the callee on one path; a select would hand it a new
    # tensor, and the caller's in-place update after the call would no longer reach what it kept.
    store = "{}" if "setdefault" in call else "[]"
    body = f"""
    def keep(x, saved):
        if x.sum() > 0:
            {call.format("x")}
        else:
            {call.format("x * 2")}


    @torch.no_grad()
    def f(x):
        saved = {store}
        keep(x, saved)
        x.add_(1)
        return {use}
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),)])
    _declined(result, "may keep or return its argument")


def test_a_call_that_only_reads_its_argument_is_still_fixed(tmp_path):
    body = """
    @torch.no_grad()
    def f(x):
        if x.sum() > 0:
            y = torch.relu(x)
        else:
            y = torch.relu(x * 2)
        return y
    """
    text, result = _fix(body)
    assert result.text != text, [d.reason for d in result.declined]
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, -2.0]),)])


# -- 8. a static conjunct after a tensor one -------------------------------------------------------

@pytest.mark.parametrize("test", ["(x > 0) and x.dtype == torch.float16", "(x + w).sum() > 0 and x.dtype == torch.float16"])
def test_a_tensor_conjunct_that_may_raise_before_a_static_one_is_unsafe(tmp_path, test):
    # The kept `if x.dtype == ...:` decides first; the original evaluated the tensor part first,
    # and it raises (several elements, shapes that do not broadcast) even where the dtype differs.
    body = f"""
    @torch.no_grad()
    def f(x, w):
        if {test}:
            y = x * 2
        else:
            y = x * 3
        return y
    """
    text, result = _fix(body, dynamic=True)
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]), torch.ones(3))])
    assert result.text == text
    unsafe = fix_text("m.py", text, RuleContext(threshold=Safety.UNSAFE, verified=True), RULES,
                      {"GM101": [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ")]})
    (fix,) = unsafe.applied
    assert fix.safety is Safety.UNSAFE and "static part" in fix.notes


def test_a_zero_d_conjunct_before_a_static_one_is_still_fixed(tmp_path):
    body = """
    @torch.no_grad()
    def f(x):
        if (x != 0).any() and x.dtype == torch.float32:
            y = x * 2
        else:
            y = x * 3
        return y
    """
    text, result = _fix(body)
    assert "torch.where" in result.text, [d.reason for d in result.declined]
    _behaves_the_same(tmp_path, text, result.text, "f", [lambda m: (torch.tensor([1.0, 2.0]),), lambda m: (torch.tensor([-1.0]),)])


# -- 9. a condition trusted from Dynamo's report that is a Python value on another call ------------

@pytest.mark.parametrize("form", ["statement", "expression"])
def test_a_trusted_condition_that_is_a_python_value_on_another_call_is_decided_as_the_if_did(tmp_path, form):
    # Dynamo reported the branch for a tensor `gate`; the same function also gets None, a
    # number or an empty list, which `if` tests by truth value and torch.where cannot take.
    body = ("""
    @torch.no_grad()
    def f(x, gate):
        if gate:
            y = x * 2
        else:
            y = x * 3
        return y
    """ if form == "statement" else """
    @torch.no_grad()
    def f(x, gate):
        return x * 2 if gate else x * 3
    """)
    text, result = _fix(body, dynamic=True)
    assert result.text != text, [d.reason for d in result.declined]
    cases = [lambda m, g=g: (torch.tensor([1.0]), g) for g in (torch.tensor(True), torch.tensor([0.0]), None, 0.0, 2, [])]
    _behaves_the_same(tmp_path, text, result.text, "f", cases)
    reset_dynamo()
    graphs = []
    compiled = torch.compile(load_module(tmp_path, result.text).f, backend=lambda gm, _: graphs.append(gm) or gm.forward)
    compiled(torch.tensor([1.0]), torch.tensor(True))
    assert len(graphs) == 1  # a tensor condition is still selected in one graph


# -- 10. grad mode: only the innermost switch decides ----------------------------------------------

@pytest.mark.parametrize("inner", ["torch.enable_grad()", "torch.inference_mode(False)", "torch.set_grad_enabled(True)",
                                   "torch.set_grad_enabled(mode)"])
def test_grad_turned_back_on_inside_no_grad_is_not_no_grad(tmp_path, inner):
    body = f"""
    @torch.no_grad()
    def f(x, t, mode=True):
        with {inner}:
            if x.sum() > 0:
                y = x * 2
            else:
                y = t * 3
        return y
    """
    text, result = _fix(body)
    _behaves_the_same(tmp_path, text, result.text, "f", [_x_plain_t_grad])
    _declined(result, "require grad")


@pytest.mark.parametrize("outer", ["@torch.no_grad()", "@torch.inference_mode()", "@torch.enable_grad()\n    @torch.no_grad()"])
def test_grad_turned_off_innermost_is_still_no_grad(tmp_path, outer):
    body = f"""
    {outer}
    def f(x, t):
        if x.sum() > 0:
            y = x * 2
        else:
            y = t * 3
        return y
    """
    text, result = _fix(body)
    assert result.text != text, [d.reason for d in result.declined]
    _behaves_the_same(tmp_path, text, result.text, "f", [_x_plain_t_grad])


@pytest.mark.parametrize("deferred, call", [("lambda a: {}", "g(x)"), ("({} for a in [x])", "next(g)")])
def test_a_lambda_or_generator_made_under_no_grad_runs_later_with_grad(tmp_path, deferred, call):
    body = f"""
    def f(x, t):
        with torch.no_grad():
            g = {deferred.format("a * 2 if a.sum() > 0 else t * 3")}
        return {call}
    """
    text, result = _fix(body)
    before, after = load_module(tmp_path, text), load_module(tmp_path, result.text)
    _same(_observe(before.f, _x_plain_t_grad(before)), _observe(after.f, _x_plain_t_grad(after)), result.text)
    _declined(result, "require grad")
