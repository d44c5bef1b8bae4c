"""Evaluating the arm not taken: realistic programs whose unselected arm is inf/NaN, raises or
warns for its operands, written as a user would (not built from the rules' lists).

After a GM101/GM402 rewrite ``torch.where`` evaluates both arms. Each program here is either
declined with a reason, or rewritten only where that is provably the same program (no gradient
flows, the operand's dtype is shown). For the declined ones the test also shows the hazard is
real: the naive select back-propagates NaN where the original's gradient is finite.
"""

from __future__ import annotations

import libcst as cst
import pytest
import torch

from graphmend.transforms import _analysis as A
from tests.transforms._side_effect_support import load_module
from tests.transforms.test_predication_redteam import _declined_or_same, _grad
from tests.transforms.test_predication_soundness import _fix

# two parallel vectors whose float32 cosine rounds to exactly 1.0 (acos' is -inf there)
_PARALLEL = [0.49625658988952637, 0.7682217955589294, 0.08847743272781372]

# name -> (the function, an input on which the arm with the hazard is NOT taken, the naive select)
PROGRAMS = {
    # the negative log-likelihood of a probability, or a linear penalty where some probability is 0
    "log of a probability that can be 0": ("""
def nll(p):
    if (p > 0).all():
        y = -torch.log(p)
    else:
        y = p * 2
    return y
""", lambda: (_grad(torch.tensor([0.5, 0.0])),), lambda p: torch.where((p > 0).all(), -torch.log(p), p * 2)),
    # standardise by the standard deviation unless a row is constant
    "sqrt of a variance": ("""
def standardise(x):
    centred = x - x.mean(-1, keepdim=True)
    var = centred.square().mean(-1, keepdim=True)
    if (var > 1e-12).all():
        y = centred / var.sqrt()
    else:
        y = centred
    return y
""", lambda: (_grad(torch.tensor([[1.0, 1.0, 1.0]])),),
        lambda x: torch.where(((x - x.mean(-1, keepdim=True)).square().mean(-1, keepdim=True) > 1e-12).all(),
                              (x - x.mean(-1, keepdim=True)) / (x - x.mean(-1, keepdim=True)).square().mean(-1, keepdim=True).sqrt(),
                              x - x.mean(-1, keepdim=True))),
    # an inverse where every element is non-zero, else a masked copy (the conditional expression)
    "1 / x with a zero that is not selected": ("""
def inverse(x):
    return 1 / x if (x != 0).all() else x * 0.5
""", lambda: (_grad(torch.tensor([2.0, 0.0])),), lambda x: torch.where((x != 0).all(), 1 / x, x * 0.5)),
    # the angle between two vectors, from a cosine that rounding can push past 1
    "acos of a cosine past 1 by rounding": ("""
def angle(a, b):
    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    if (cos < 1).all():
        y = torch.acos(cos)
    else:
        y = cos * 0.0
    return y
""", lambda: (_grad(torch.tensor(_PARALLEL)), torch.tensor(_PARALLEL) * 3),
        lambda a, b: (lambda c: torch.where((c < 1).all(), torch.acos(c), c * 0.0))(
            (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)))),
}


def _grads(fn, args) -> list:
    out = fn(*args)
    out.sum().backward()
    return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_an_arm_that_is_not_finite_where_it_is_not_taken_is_declined_when_gradients_flow(tmp_path, name):
    body, make, naive = PROGRAMS[name]
    text, result = _fix(body, dynamic=True)
    assert not result.applied, result.text
    assert result.declined and all(d.reason for d in result.declined)
    if "acos" not in name:  # torch.acos is declined as not vetted at all
        assert any("inf/NaN" in d.reason for d in result.declined), [d.reason for d in result.declined]
    # the hazard is real: the original's gradient is finite, the naive select's is not
    entry = [n for n in ("nll", "standardise", "inverse", "angle") if f"def {n}(" in text][0]
    original = _grads(getattr(load_module(tmp_path, text), entry), make())
    assert all(torch.isfinite(g).all() for g in original), original
    assert any(not torch.isfinite(g).all() for g in _grads(naive, make())), name


@pytest.mark.parametrize("name", ["log of a probability that can be 0", "1 / x with a zero that is not selected"])
def test_the_same_program_without_gradients_is_rewritten_and_selects_the_same_values(tmp_path, name):
    """Under ``torch.no_grad()`` the inf/NaN of the unselected arm is never selected nor
    back-propagated (and these ops neither raise nor warn on it): the rewrite is exact."""
    body, make, _ = PROGRAMS[name]
    entry = "nll" if "log" in name else "inverse"
    guarded = body.replace(f"def {entry}(", f"@torch.no_grad()\ndef {entry}(")
    text, result = _fix(guarded, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]
    _declined_or_same(tmp_path, guarded, entry, [lambda: tuple(a.detach() for a in make()),
                                                 lambda: (torch.tensor([0.5, 0.25]),)])


# scores with an additive mask that may hold -inf or NaN; ``arm`` is the branch the mask may not take
GATE = """
def gate(scores, mask):
    h = scores + mask
    if (h > 0).any():
        y = {arm}
    else:
        y = h * 2
    return y
"""


@pytest.mark.parametrize("arm", ["h * 0.5", "h.clamp(min=0.0)", "h.masked_fill(h < 0, 0.0)"])
def test_an_arm_finite_in_backward_for_any_input_is_still_rewritten(tmp_path, arm):
    """No overreach: products with a bool mask or a Python number, clamps and fills give a zero
    gradient through the unselected arm even where the input holds -inf or NaN."""
    body = GATE.format(arm=arm)
    text, result = _fix(body, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]
    masked = torch.tensor([[0.0, float("-inf"), float("nan")]])
    _declined_or_same(tmp_path, body, "gate", [lambda: (_grad(torch.ones(1, 3)), masked.clone()),
                                               lambda: (_grad(-torch.ones(1, 3)), masked.clone())])
    assert "torch.where" in result.text or "_graphmend_select" in result.text


@pytest.mark.parametrize("arm", ["h * h", "h.tanh()", "torch.sigmoid(h) * h", "h.exp()"])
def test_an_arm_not_finite_in_backward_for_a_non_finite_input_is_declined(arm):
    body = GATE.format(arm=arm)
    _, result = _fix(body, dynamic=True)
    assert not result.applied
    assert any("inf/NaN" in d.reason for d in result.declined), [d.reason for d in result.declined]


def test_a_nan_prone_arm_that_no_gradient_reaches_is_rewritten():
    """Only buffers (never trained) feed the arm: no gradient reaches it, so its inf/NaN is harmless."""
    body = """
class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("stat", torch.ones(3))

    def forward(self, x):
        if x.sum() > 0:
            y = self.stat.exp()
        else:
            y = self.stat * 2
        return x + y
"""
    _, result = _fix(body, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]


def _classes(expr: str, dtypes=None) -> frozenset:
    return A.dtype_classes(cst.parse_expression(expr), A._Torch(), frozenset(), dtypes or {})


def test_dtype_facts_proven_by_the_condition():
    t = A._Torch()

    def facts(expr: str, known=None):
        return A.dtype_facts(cst.parse_expression(expr), t, known or {})

    assert facts("(x > 0).any()") == {"x": "bool int float"}
    assert facts("x.sum() > 0") == {"x": "bool int float"}  # through sum: complex only
    # abs of a complex tensor is real: `>` tells nothing of x, abs itself says it is not bool
    assert facts("x.abs().sum() > 0") == {"x": "int float complex"}
    assert facts("(-m).any()") == {"m": "int float complex"}
    assert facts("x.isinf().any()") == {}
    assert facts("(x > 0).any()", {"x": "float16"}) == {"x": "float"}


def test_dtype_facts_after_hoisted_setups():
    t = A._Torch()
    setups = [("z", cst.parse_expression("h * 3")), ("h", cst.parse_expression("h.to(torch.complex64)")),
              ("w", None)]
    after = A.dtypes_after_setups({"h": "bool int float", "w": "float"}, {}, setups, t, frozenset())
    assert after["z"] == "int float complex"  # never bool: a product with a Python number
    assert after["h"] == "complex"  # rebound by a setup: the condition's fact no longer holds
    assert "w" not in after


def test_dtype_classes_of_expressions():
    assert _classes("x") == frozenset(A.D.DTYPE_CLASSES)
    assert _classes("x", {"x": "float16"}) == {"float"}
    assert _classes("x > 0") == _classes("x.isinf()") == _classes("torch.logical_not(m)") == {"bool"}
    assert _classes("x.float()") == {"float"} and _classes("x.long()") == {"int"}
    assert _classes("x.to(torch.bfloat16)") == {"float"}
    assert _classes("(x > 0) + 1") == {"int"} and "bool" in _classes("(x > 0) * (y > 0)")
    assert _classes("x.abs()", {"x": "complex64"}) == {"float"}
    assert _classes("x.clamp(min=0)", {"x": "int64"}) == {"int"}


@pytest.mark.parametrize("expr, dtypes, fallible", [
    ("flags - 1", {}, True), ("flags - 1", {"flags": "int64"}, False), ("1 - (x > 0)", {}, True),
    ("x.clamp(min=0)", {}, True), ("x.clamp(min=0)", {"x": "float32"}, False),
    ("x.masked_fill(m, 0)", {"x": "float32"}, True), ("x.masked_fill(x > 0, 0)", {"x": "float32"}, False),
    ("x.masked_fill(x > 0, 0)", {}, True), ("~(x > 0)", {"x": "int64"}, False), ("~x", {}, True),
    ("z.float()", {}, True), ("z.float()", {"z": "bool int float"}, False), ("(x > 0).float()", {"x": "int8"}, False),
    ("x.sign()", {"x": "bool"}, False), ("x > 0", {}, True), ("x > 0", {"x": "int32"}, False),
])
def test_shape_fallible_sees_ops_that_raise_or_warn_for_some_dtypes(expr, dtypes, fallible):
    found = A.shape_fallible(cst.parse_expression(expr), A._Torch(), frozenset(), dtypes)
    assert bool(found) is fallible, (expr, found)


def test_finite_values():
    t = A._Torch()
    # a product with a bool mask: each operand's gradient is multiplied by finite values only
    assert not A.effects(cst.parse_expression("h * (h > 0)"), t).nan_prone
    assert A.effects(cst.parse_expression("h * h"), t).nan_prone
    for expr in ("x > 0", "x.isnan()", "x.nan_to_num()", "torch.zeros_like(x)", "x.long()", "2.0", "(x > 0) & m"):
        assert A.finite_value(cst.parse_expression(expr), t), expr
    for expr in ("x", "x + mask", "x.clamp(-1, 1)", "1 / x", "1e30", "x.nan_to_num(posinf=y)"):
        assert not A.finite_value(cst.parse_expression(expr), t), expr


# --- what the assignments before the site show: a submodule's output, an earlier value ---------


_SUBMODULE = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = {module}

    def forward(self, x):
        h = self.proj(x)
        if h.sum() > 0:
            h = {arm}
        return h
"""


@pytest.mark.parametrize("module", ["nn.Linear(3, 3)", "nn.LayerNorm(3)", "nn.Conv1d(3, 3, 1)"])
@pytest.mark.parametrize("arm", ["h - 1", "1 - h", "-h", "h.abs() - h"])
def test_a_weighted_or_norm_submodules_output_is_never_bool_so_subtraction_stays_fixed(tmp_path, module, arm):
    """`h - 1` raises only for a bool tensor, and a Linear, a Conv or a LayerNorm never returns
    one: the common fix stays safe, and is the same program."""
    body = _SUBMODULE.format(module=module, arm=arm)
    _, result = _fix(body, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]
    shape = (2, 3, 1) if "Conv" in module else (2, 3)
    _declined_or_same(tmp_path, body, "Block", [lambda: (_grad(torch.ones(shape)),),
                                                lambda: (_grad(-torch.ones(shape)),)])


@pytest.mark.parametrize("module", ["nn.Identity()", "nn.Flatten(0)", "Custom()"])
def test_a_submodule_that_may_return_a_bool_tensor_leaves_subtraction_unproven(tmp_path, module):
    """An Identity hands back what it is given: a bool mask, on which `h - 1` raises. Neither it
    nor a module of this file proves a dtype, so the fix is left for --unsafe-fixes."""
    body = "class Custom(nn.Module):\n    def forward(self, x):\n        return x\n\n\n" + _SUBMODULE.format(
        module=module, arm="h - 1")
    text, result = _fix(body, dynamic=True)
    assert not result.applied and result.text == text
    blk = load_module(tmp_path, text).Block()
    assert blk(torch.tensor([False, False])).tolist() == [False, False]  # the branch not taken raises for bool


@pytest.mark.parametrize("other", [
    "    def reset(self):\n        self.proj = nn.Identity()\n",
    "    def reset(self):\n        self.add_module('proj', nn.Identity())\n",
    "    def reset(self):\n        setattr(self, 'proj', nn.Identity())\n",
])
def test_a_submodule_rebound_elsewhere_proves_no_dtype(other):
    body = _SUBMODULE.format(module="nn.Linear(3, 3)", arm="h - 1") + "\n" + other
    _, result = _fix(body, dynamic=True)
    assert not result.applied


def test_a_linear_may_return_a_complex_tensor_so_clamp_needs_the_condition():
    """clamp raises for a complex tensor, and a Linear built with a complex dtype returns one; a
    LayerNorm never does, and a condition that would have raised for one (`h > 0`) proves it too."""
    lin = _SUBMODULE.format(module="nn.Linear(3, 3)", arm="h.clamp(min=0.0)").replace("h.sum() > 0", "(h != 0).any()")
    assert not _fix(lin, dynamic=True)[1].applied
    assert _fix(lin.replace("(h != 0).any()", "(h > 0).any()"), dynamic=True)[1].applied
    assert _fix(lin.replace("nn.Linear(3, 3)", "nn.LayerNorm(3)"), dynamic=True)[1].applied
    assert torch.nn.Linear(3, 3, dtype=torch.complex64)(torch.ones(3, dtype=torch.complex64)).is_complex()


def _reaching(body: str, names=("h",)) -> dict:
    from graphmend.transforms import _reads as R
    from graphmend.transforms.base import SourceFile, iter_nodes

    source = SourceFile("m.py", "import torch\nfrom torch import nn\n\n\n" + body)
    site = next(n for n in iter_nodes(source.module, (cst.If,)) if "site" in A.code(n.test))
    func = source.enclosing(site, (cst.FunctionDef,))
    t = A.torch_names_of(source.module)
    return A.reaching_dtypes(func, site, set(names), source.parent, t,
                             R.Reads(source, func, t.torch_names | t.f_names).output_classes)


def test_the_assignment_that_reaches_the_site_gives_the_dtype_classes():
    straight = "def f(x, m):\n    h = (x > 0)\n    h = h.sum() * 0.5\n    if site:\n        pass\n"
    assert _reaching(straight) == {"h": "float"}  # an integer sum times 0.5
    assert _reaching("def f(x, m):\n    h = x > 0; h = x\n    if site:\n        pass\n") == {}  # the last binding of the line
    assert _reaching("def f(x, m):\n    h = x; h = x > 0\n    if site:\n        pass\n") == {"h": "bool"}
    assert _reaching("def f(x, m):\n    g = x.float()\n    h = g + m\n    if site:\n        pass\n") == {}  # m: any class
    assert _reaching("def f(x, m):\n    g = x.float()\n    h = g * 2\n    if site:\n        pass\n") == {"h": "float"}


@pytest.mark.parametrize("between", [
    "    if m.any():\n        h = m\n",  # bound in a branch
    "    for _ in range(2):\n        h = m\n",  # in a loop
    "    h += m\n",  # an augmented assignment
    "    h, g = m, m\n",  # unpacking
])
def test_a_name_bound_otherwise_before_the_site_has_no_known_dtype(between):
    body = "def f(x, m):\n    h = x.float()\n" + between + "    if site:\n        pass\n"
    assert _reaching(body) == {}


def test_a_handler_or_loop_else_does_not_see_past_the_body_that_may_have_bound_the_name():
    handler = ("def f(x, m):\n    h = x.float()\n    try:\n        h = m\n        m.foo()\n    except AttributeError:\n"
               "        if site:\n            pass\n")
    assert _reaching(handler) == {}
    loop_else = "def f(x, m):\n    h = x.float()\n    for _ in m:\n        h = m\n    else:\n        if site:\n            pass\n"
    assert _reaching(loop_else) == {}
    body = "def f(x, m):\n    h = x.float()\n    try:\n        if site:\n            pass\n    except ValueError:\n        h = m\n"
    assert _reaching(body) == {"h": "float"}


def test_a_site_inside_a_loop_body_does_not_trust_an_assignment_before_the_loop():
    body = "def f(x, m):\n    h = x.float()\n    for _ in m:\n        if site:\n            pass\n        h = m\n"
    assert _reaching(body) == {}


def test_a_matrix_product_not_taken_runs_only_where_the_shapes_chain(tmp_path):
    """`x @ x` raises for a [2, 3] tensor: the branch not taken must not run it."""
    body = """
@torch.no_grad()
def square(x):
    if x.sum() > 0:
        y = x @ x
    else:
        y = x * 2
    return y
"""
    _declined_or_same(tmp_path, body, "square", [lambda: (-torch.ones(2, 3),), lambda: (torch.ones(3, 3),)])
