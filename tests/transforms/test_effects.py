"""The shared effect/alias analysis: every vetted list entry checked against torch itself,
and the rules (GM101, GM402) declining the alias hazards it finds."""

from __future__ import annotations

import warnings

import libcst as cst
import pytest
import torch
import torch.nn.functional as F

from graphmend.model import Decline, Fix, Safety
from graphmend.transforms import _effects as E
from graphmend.transforms._analysis import torch_names_of
from graphmend.transforms.base import RuleContext, SourceFile
from graphmend.transforms.conditional_expression_on_tensor import ConditionalExpressionOnTensor
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

# The dtype a conversion is a no-op on (then torch returns the receiver itself).
_CONVERSION_DTYPE = {"double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16, "int": torch.int32,
                     "long": torch.int64, "short": torch.int16, "bool": torch.bool, "byte": torch.uint8, "char": torch.int8}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _shares(result, x: torch.Tensor) -> bool:
    parts = result if isinstance(result, (tuple, list)) else (result,)
    return bool(parts) and all(_storage(p) == _storage(x) for p in parts)


@pytest.mark.parametrize("name", sorted(E.ALIAS_METHODS))
def test_alias_method_returns_its_receiver_storage(name):
    x = torch.randn(2, 3).to(_CONVERSION_DTYPE.get(name, torch.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # named tensors are a prototype
        result = eval(f"x.{name}{E.ALIAS_METHODS[name]}", {"torch": torch, "x": x})
    assert _shares(result, x), name


@pytest.mark.parametrize("name", sorted(E.ALIAS_FUNCS))
def test_alias_function_returns_its_argument_storage(name):
    x = torch.randn(2, 3)
    args = E.ALIAS_FUNCS[name]
    source = x.to(torch.complex64) if "complex64" in args else x
    result = eval(f"torch.{name}{args.replace('x.to(torch.complex64)', 'src')}", {"torch": torch, "x": x, "src": source})
    assert _shares(result, source), name


@pytest.mark.parametrize("name", sorted(E.ALIAS_ATTRS))
def test_alias_attribute_is_a_view(name):
    x = torch.randn(2, 3, dtype=torch.complex64) if name in ("H", "mH", "real", "imag") else torch.randn(2, 3)
    assert _shares(getattr(x, name), x)


def _inplace_input(name: str) -> torch.Tensor:
    shape = {"dropout3d": (2, 2, 4, 8), "dropout2d": (2, 4, 8), "Dropout3d": (2, 2, 4, 8), "Dropout2d": (2, 4, 8)}
    torch.manual_seed(0)
    return torch.randn(*shape.get(name, (4, 8))) * 3


_FUNC_EXTRA = {"threshold": (0.0, 0.0)}
_FUNC_KW = {"alpha_dropout": {"training": True}, "feature_alpha_dropout": {"training": True}}


@pytest.mark.parametrize("name", sorted(E.INPLACE_FLAG_FUNCS))
def test_inplace_flag_function_writes_its_argument(name):
    x = _inplace_input(name)
    before = x.clone()
    result = getattr(F, name)(x, *_FUNC_EXTRA.get(name, ()), inplace=True, **_FUNC_KW.get(name, {}))
    assert _shares(result, x)
    assert not torch.equal(x, before), f"F.{name}(..., inplace=True) left its argument unchanged"


@pytest.mark.parametrize("name", sorted(E.INPLACE_FLAG_MODULES))
def test_inplace_flag_module_writes_its_argument(name):
    x = _inplace_input(name)
    before = x.clone()
    module = getattr(torch.nn, name)(*_FUNC_EXTRA.get(name.lower(), ()), inplace=True).train()
    result = module(x)
    assert _shares(result, x)
    assert not torch.equal(x, before), f"nn.{name}(inplace=True) left its argument unchanged"


_CTOR = {
    "Linear": ("(8, 8)", (4, 8)), "Bilinear": None, "Conv1d": ("(4, 4, 3)", (2, 4, 8)), "Conv2d": ("(2, 2, 3)", (1, 2, 4, 8)),
    "Conv3d": ("(2, 2, 1)", (1, 2, 2, 4, 8)), "ConvTranspose1d": ("(4, 4, 3)", (2, 4, 8)),
    "ConvTranspose2d": ("(2, 2, 3)", (1, 2, 4, 8)), "ConvTranspose3d": ("(2, 2, 1)", (1, 2, 2, 4, 8)),
    "LayerNorm": ("(8,)", (4, 8)), "GroupNorm": ("(2, 4)", (2, 4, 8)), "RMSNorm": ("(8,)", (4, 8)),
    "BatchNorm1d": ("(4,)", (2, 4, 8)), "BatchNorm2d": ("(2,)", (1, 2, 4, 8)), "BatchNorm3d": ("(2,)", (1, 2, 2, 4, 8)),
    "InstanceNorm1d": ("(4,)", (2, 4, 8)), "InstanceNorm2d": ("(2,)", (1, 2, 4, 8)), "Embedding": None,
    "Flatten": ("()", (2, 4, 8)), "Unflatten": ("(1, (2, 4))", (4, 8)), "MaxPool1d": ("(2,)", (2, 4, 8)),
    "MaxPool2d": ("(2,)", (1, 2, 4, 8)), "AvgPool1d": ("(2,)", (2, 4, 8)), "AvgPool2d": ("(2,)", (1, 2, 4, 8)),
    "AdaptiveAvgPool1d": ("(2,)", (2, 4, 8)), "AdaptiveAvgPool2d": ("(2,)", (1, 2, 4, 8)),
    "Threshold": ("(0.0, 0.0)", (4, 8)),
}


@pytest.mark.parametrize("name", sorted(E.NON_WRITING_MODULES))
def test_non_writing_module_leaves_its_argument(name):
    ctor, shape = _CTOR.get(name) or ("()", (4, 8))
    if name == "Bilinear":
        module, args = torch.nn.Bilinear(8, 8, 2), (torch.randn(4, 8), torch.randn(4, 8))
    elif name == "Embedding":
        module, args = torch.nn.Embedding(10, 4), (torch.tensor([1, 2, 3]),)
    else:
        module, args = eval(f"torch.nn.{name}{ctor}", {"torch": torch}), (torch.randn(*shape) * 3,)
    before = [a.clone() for a in args]
    module.train()(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before)), f"nn.{name} wrote its argument"


@pytest.mark.parametrize("name", sorted(E.NON_FINITE_FUNCS))
def test_non_finite_op_has_a_finite_input_with_a_non_finite_value_or_gradient(name):
    z = torch.zeros(2, 3, requires_grad=True)
    o = torch.ones(2, 3, requires_grad=True)
    n = torch.full((2, 3), float("-inf"), requires_grad=True)
    fn = f"torch.{name}" if hasattr(torch, name) else f"F.{name}"
    out = eval(f"{fn}{E.NON_FINITE_FUNCS[name]}", {"torch": torch, "F": F, "z": z, "o": o, "n": n})
    grads = torch.autograd.grad(out.sum(), [z, o, n], allow_unused=True)
    finite_grads = all(g is None or torch.isfinite(g).all() for g in grads)
    assert not torch.isfinite(out).all() or not finite_grads, name
    # only the -inf row input is itself non-finite; the others are finite
    assert name in ("softmax", "log_softmax", "logsumexp", "softmin") or "n" not in E.NON_FINITE_FUNCS[name]


# --------------------------------------------------------------------------------------------
# The rules consult it: realistic modules where a select would lose an in-place update.

STATIC = RuleContext(threshold=Safety.UNSAFE)
RULES = [DataDependentBranch(), ConditionalExpressionOnTensor()]
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"

INVALID = {
    "submodule built inplace writes the clamped name": ("""
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        if x.max() > 5:
            x = x.clamp(max=5)
        self.act(x)
        return x
""", "built with `inplace=True`"),
    "functional inplace flag": ("""
def f(x):
    if x.max() > 5:
        x = x.clamp(max=5)
    F.relu(x, inplace=True)
    return x
""", "(`inplace=`)"),
    "out= argument through a conditional expression": ("""
def f(x):
    y = x if x.sum() > 0 else x.abs()
    torch.add(y, 1, out=y)
    return y
""", "`out=` argument"),
    "no-op float conversion is the caller's tensor": ("""
def f(x):
    if x.sum() > 0:
        y = x.float()
    else:
        y = x * 2
    y.add_(1)
    return y
""", "may share its tensor"),
    "alias made after the branch": ("""
def f(x):
    if x.sum() > 0:
        x = x.clamp(min=0)
    z = x.contiguous().view(-1)
    z.mul_(2)
    return z
""", "may share its tensor with `x`"),
    "unknown helper may write its argument": ("""
def f(x, cache):
    y = x.cpu() if x.mean() > 0 else x.neg()
    cache.update(y)
    return y
""", "not known to leave its arguments unchanged"),
    "earlier write in the next loop iteration": ("""
def f(x):
    acc = x
    for _ in range(2):
        acc.add_(1)
        if acc.sum() > 0:
            acc = acc.clamp(max=3)
    return acc
""", "may share its tensor"),
    "conditional expression written in place directly": ("""
def f(x, y):
    (x if x.sum() > 0 else y).mul_(2)
    return x, y
""", "updates a tensor in place"),
    "selected call argument is written by an unknown callee": ("""
class M(nn.Module):
    def forward(self, x, mask):
        if mask.all():
            out = self.proj(x.detach())
        else:
            out = self.proj(x)
        return out
""", "not known to leave its arguments unchanged"),
}

VALID = {
    "the write goes to a new tensor only": """
def f(x):
    if x.max() > 5:
        x = x.clamp(max=5)
    y = x * 2
    y.add_(1)
    return y
""",
    "a vetted submodule reads the selected name": """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.proj(x)
        if x.max() > 5:
            x = x.clamp(max=5)
        outputs = (self.act(self.proj(x)),)
        outputs += (x,)
        return outputs
""",
    "writes before the branch reach the same tensor in both programs": """
def f(x):
    x.mul_(2)
    if x.sum() > 0:
        x = x * 0.5  # an arm that cannot fail while Dynamo traces it (x.clamp(max=1) is not shown so)
    return x + 1
""",
}


def _decline_reasons(text: str) -> list[str]:
    source = SourceFile("m.py", text)
    outcomes = [o for rule in RULES for o in rule.run(source, STATIC, None)]
    assert not any(isinstance(o, Fix) for o in outcomes), [o.title for o in outcomes if isinstance(o, Fix)]
    return [o.reason for o in outcomes if isinstance(o, Decline)]


@pytest.mark.parametrize("case", sorted(INVALID))
def test_alias_hazard_declined(case):
    body, reason = INVALID[case]
    reasons = _decline_reasons(HEADER + body.lstrip("\n"))
    assert any(reason in r for r in reasons), reasons


def _run_both(text: str, name: str, make_args, instance: bool):
    ns: dict = {}
    exec(compile(text, "<m>", "exec"), ns)
    obj = ns[name]() if instance else ns[name]
    torch.manual_seed(0)
    if instance:
        obj.load_state_dict(obj.state_dict())
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        fn = obj
        if instance:
            torch.manual_seed(0)
            fn = ns[name]()
        runner = torch.compile(fn, backend="aot_eager", fullgraph=False) if compiled else fn
        args = make_args()
        out = runner(*args)
        results.append((out, args))
    return results


@pytest.mark.parametrize("case", sorted(VALID))
def test_alias_safe_case_is_rewritten_with_equal_values_and_inputs(case):
    text = HEADER + VALID[case].lstrip("\n")
    result = fix_text("m.py", text, STATIC, RULES)
    assert result.applied and "torch.where" in result.text, [d.reason for d in result.declined]
    instance = "class Block" in text
    name = "Block" if instance else "f"
    for seed_input in (torch.tensor([[1.0, 9.0, -2.0, 3.0]]), torch.tensor([[0.5, 0.1, -0.2, 0.3]])):
        def make_args(s=seed_input):
            return (s.clone(),)
        before = _run_both(text, name, make_args, instance)
        after = _run_both(result.text, name, make_args, instance)
        for (out_a, args_a), (out_b, args_b) in zip(before, after):
            torch.testing.assert_close(out_b, out_a)
            torch.testing.assert_close(args_b, args_a)  # the caller's tensors after the call


ESCAPING = {
    # The fuzzer's find: the caller gets its own tensor back on one path.
    "else_less": "def f(x):\n    if x.mean() > 0:\n        x = x.clamp(max=2.0)\n    return x\n",
    # The assignment form with both arms written out; the value escapes by return.
    "returned": "def f(x):\n    if x.sum() > 0:\n        y = x\n    else:\n        y = x * 2\n    return y\n",
    # ... by being stored on the module.
    "stored": ("class M(nn.Module):\n    def forward(self, x):\n        if x.sum() > 0:\n            y = x\n"
               "        else:\n            y = x * 2\n        self.last = y\n        return y.sum()\n"),
    # ... or written in place later (the caller's tensor is written on one path only).
    "written": "def f(x):\n    if x.sum() > 0:\n        y = x\n    else:\n        y = x * 2\n    y.add_(1)\n    return y.sum()\n",
}


@pytest.mark.parametrize("case", sorted(ESCAPING))
@pytest.mark.parametrize("threshold", [Safety.SAFE, Safety.UNSAFE])
def test_a_caller_owned_value_kept_by_an_assignment_is_declined(case, threshold):
    text = HEADER + ESCAPING[case]
    ctx = RuleContext(threshold=threshold)
    (outcome,) = RULES[0].run(SourceFile("m.py", text), ctx, None)
    assert isinstance(outcome, Decline), outcome
    assert any(why in outcome.reason for why in ("a tensor not made in this function", "in place", "writes into `self`")), outcome.reason
    result = fix_text("m.py", text, ctx, RULES)
    assert not result.applied and result.text == text
    x = torch.tensor([-1.0, -2.0])
    same = x.clamp(max=2.0) if x.mean() > 0 else x  # the original: the caller's own tensor
    selected = torch.where(x.mean() > 0, x.clamp(max=2.0), x)
    assert same is x and selected is not x


def test_a_fresh_tensor_kept_by_an_assignment_stays_safe():
    fresh = HEADER + """
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(4)

    def forward(self, h):
        h = self.norm(h)
        if (torch.isinf(h).any()):
            h = torch.clamp(h, min=-1000.0, max=1000.0)
        return (h,)
"""
    (fix,) = [o for o in RULES[0].run(SourceFile("m.py", fresh), STATIC, None) if isinstance(o, Fix)]
    assert fix.safety is Safety.SAFE, fix.notes


@pytest.mark.parametrize("name", sorted(E.FRESH_MODULES))
def test_fresh_module_returns_a_new_tensor(name):
    ctor, shape = _CTOR.get(name) or ("()", (4, 8))
    if name == "Bilinear":
        module, args = torch.nn.Bilinear(8, 8, 2), (torch.randn(4, 8), torch.randn(4, 8))
    elif name == "Embedding":
        module, args = torch.nn.Embedding(10, 4), (torch.tensor([1, 2, 3]),)
    else:
        module, args = eval(f"torch.nn.{name}{ctor}", {"torch": torch}), (torch.randn(*shape) * 3,)
    for mode in (True, False):
        out = module.train(mode)(*args)
        assert all(_storage(out) != _storage(a) for a in args), f"nn.{name} returned its argument's storage"


# --------------------------------------------------------------------------------------------
# Gradient sources: which ops pass requires_grad on (and have a derivative), which never do.

_X = "x"  # a (2, 3) float tensor that requires grad
_GRAD_CALLS = {
    "addmm": "torch.addmm(x, x, x.t() @ x)", "baddbmm": "torch.baddbmm(x[None], x[None], (x.t() @ x)[None])",
    "bmm": "torch.bmm(x[None], x.t()[None])", "broadcast_to": "torch.broadcast_to(x, (2, 2, 3))",
    "cat": "torch.cat([x, x])", "concat": "torch.concat([x, x])", "concatenate": "torch.concatenate([x, x])",
    "einsum": "torch.einsum('ij,kj->ik', x, x)", "expand": "x[None].expand(2, 2, 3)",
    "group_norm": "F.group_norm(x, 1)", "layer_norm": "F.layer_norm(x, (3,))", "lerp": "torch.lerp(x, x * 2, 0.5)",
    "masked_fill": "x.masked_fill(x > 0, 0.0)", "matmul": "torch.matmul(x, x.t())", "mm": "torch.mm(x, x.t())",
    "movedim": "torch.movedim(x, 0, 1)", "outer": "torch.outer(x[0], x[1])", "pad": "F.pad(x, (1, 1))",
    "permute": "x.permute(1, 0)", "repeat": "x.repeat(2, 1)", "rms_norm": "F.rms_norm(x, (3,))",
    "stack": "torch.stack([x, x])", "swapaxes": "torch.swapaxes(x, 0, 1)", "threshold": "F.threshold(x, 0.1, 0.0)",
    "transpose": "x.transpose(0, 1)", "where": "torch.where(x > 0, x, x * 2)", "view": "x.view(-1)",
    "view_as": "x.view_as(x)", "expand_as": "x[:1].expand_as(x)", "chunk": "x.chunk(2)[0]", "split": "x.split(1)[0]",
    "unbind": "x.unbind()[0]", "glu": "F.glu(x[:, :2])", "float": "x.float()", "half": "x.half()",
    "double": "x.double()", "bfloat16": "x.bfloat16()", "contiguous": "x.contiguous()", "clone": "x.clone()",
    "t": "x.t()", "cpu": "x.cpu()", "diag": "torch.diag(x[0])", "hypot": "torch.hypot(x, x)",
    "atan2": "torch.atan2(x, x + 3)", "arctan2": "torch.arctan2(x, x + 3)", "fmax": "torch.fmax(x, x * 2)",
    "fmin": "torch.fmin(x, x * 2)", "maximum": "torch.maximum(x, x * 2)", "minimum": "torch.minimum(x, x * 2)",
    "reshape": "torch.reshape(x, (-1,))", "unsqueeze": "torch.unsqueeze(x, 0)", "softmin": "F.softmin(x, 0)",
}


@pytest.mark.parametrize("name", sorted(E.GRAD_FUNCS))
def test_grad_op_requires_grad_from_its_operand_and_has_a_derivative(name):
    x = torch.randn(2, 3, requires_grad=True)
    call = _GRAD_CALLS.get(name)
    if call is None:
        call = f"torch.{name}(x)" if hasattr(torch, name) else f"F.{name}(x)"
        if name in ("pow", "add", "sub", "subtract", "mul", "multiply", "div", "true_divide", "clamp_min", "clamp_max"):
            call = f"torch.{name}(x, 2.0)"
        elif name in ("softmax", "log_softmax", "softmin", "cumsum", "logsumexp", "roll", "flip"):
            call = f"torch.{name}(x, {'(0,), (0,)' if name == 'roll' else '(0,)' if name == 'flip' else '0'})"
        elif name in ("clamp", "clip"):
            call = f"torch.{name}(x, -0.5, 0.5)"
        elif name == "linear":
            call = "F.linear(x, x)"
        elif name == "normalize":
            call = "F.normalize(x)"
    out = eval(call, {"torch": torch, "F": F, "x": x})
    assert isinstance(out, torch.Tensor) and out.requires_grad, name
    (grad,) = torch.autograd.grad(out.float().sum(), [x])  # raises where no derivative exists
    assert grad is not None


_NO_GRAD_CALLS = {
    "bitwise_and": "torch.bitwise_and(i, i)", "bitwise_or": "torch.bitwise_or(i, i)", "bitwise_xor": "torch.bitwise_xor(i, i)",
    "bitwise_not": "torch.bitwise_not(i)", "finfo": "torch.finfo(x.dtype).max", "iinfo": "torch.iinfo(i.dtype).max",
    "zeros": "torch.zeros(2)", "ones": "torch.ones(2)", "full": "torch.full((2,), 1.0)", "new_zeros": "x.new_zeros(2)",
    "new_ones": "x.new_ones(2)", "new_full": "x.new_full((2,), 1.0)", "size": "x.size()", "dim": "x.dim()",
    "numel": "x.numel()", "full_like": "torch.full_like(x, 2.0)", "is_floating_point": "x.is_floating_point()", "is_complex": "x.is_complex()",
    "long": "x.long()", "int": "x.int()", "bool": "x.bool()", "short": "x.short()", "byte": "x.byte()", "char": "x.char()",
    "detach": "x.detach()", "argmax": "x.argmax()", "argmin": "x.argmin()", "any": "x.any()", "all": "x.all()",
    "logical_and": "torch.logical_and(x, x)", "logical_or": "torch.logical_or(x, x)", "logical_xor": "torch.logical_xor(x, x)",
}


@pytest.mark.parametrize("name", sorted(E.NO_GRAD_FUNCS))
def test_no_grad_op_never_requires_grad(name):
    x = torch.randn(2, 3, requires_grad=True)
    i = torch.tensor([1, 2, 3])
    call = _NO_GRAD_CALLS.get(name, f"torch.{name}(x)" if name not in ("eq", "ne", "gt", "ge", "lt", "le", "greater", "less",
                                                                      "greater_equal", "less_equal") else f"torch.{name}(x, 0.5)")
    out = eval(call, {"torch": torch, "x": x, "i": i})
    assert not (isinstance(out, torch.Tensor) and out.requires_grad), name


@pytest.mark.parametrize("name", sorted(E.PRODUCT_FUNCS))
def test_product_op_gives_nan_gradient_through_an_overflowed_operand_in_an_unselected_arm(name):
    x = torch.tensor([[1.0e10, 2.0], [3.0, 4.0]], requires_grad=True)
    calls = {"einsum": "torch.einsum('ij,jk->ik', a, x)", "baddbmm": "torch.baddbmm(x[None], a[None], x[None])",
             "addmm": "torch.addmm(x, a, x)", "addbmm": "torch.addbmm(x, a[None], x[None])", "addmv": "torch.addmv(x[0], a, x[0])",
             "mv": "torch.mv(a, x[0])", "dot": "torch.dot(a[0], x[0])", "inner": "torch.inner(a[0], x[0])",
             "outer": "torch.outer(a[0], x[0])", "bmm": "torch.bmm(a[None], x[None])", "kron": "torch.kron(a, x)"}
    a = x * 1e30  # inf where x is 1e10: an operand that overflowed
    out = eval(calls.get(name, f"torch.{name}(a, x)"), {"torch": torch, "a": a, "x": x})
    selected = torch.where(torch.tensor(False), out.sum(), x.sum())  # the product is the arm not taken
    (grad,) = torch.autograd.grad(selected, [x])
    assert not torch.isfinite(grad).all(), name


def test_grad_sources_of_arms():
    t = torch_names_of(cst.parse_module("import torch\n"))

    def sources(expr: str, scalars=frozenset()):
        return E.grad_sources(cst.parse_expression(expr), t, scalars)

    assert sources("x.clamp(max=1.0)") == sources("x * 2") == frozenset({"x"})
    assert sources("x.masked_fill(mask, 0.0)") == frozenset({"x"})
    assert sources("torch.where(x > y, x, 2.0)") == frozenset({"x"})
    assert sources("x.detach()") == sources("x > 0") == sources("x.long()") == frozenset()
    assert sources("self.weight * 2") == frozenset({"self.weight"})
    assert sources("self.buf * 2", frozenset({"self.buf"})) == frozenset()
    assert sources("torch.clamp(h, min=-c, max=c)", frozenset({"c"})) == frozenset({"h"})
    assert sources("helper(x)") is None and sources("x.to(torch.long)") is None
    assert sources("torch.zeros(3, requires_grad=True)") is None


@pytest.mark.parametrize("expr, bad", [("-x", torch.bool), ("x - x", torch.bool), ("x.sub(x)", torch.bool),
                                       ("~x", torch.float32), ("x & x", torch.float32), ("x << 1", torch.float32),
                                       ("x ** -1", torch.int64), ("x.pow(-1)", torch.int64),
                                       ("x.round(decimals=1)", torch.int64)])
def test_operator_without_a_kernel_for_some_dtypes_makes_the_select_unsafe(expr, bad):
    with pytest.raises((RuntimeError, NotImplementedError, TypeError)):
        eval(expr, {"x": torch.tensor([1, 0]).to(bad)})
    for arm in (f"    y = {expr}\n", None):
        if arm is None:  # the conditional expression
            body = f"    return x * 1 if x.sum() > 0 else {expr}\n"
        else:
            body = f"    if x.sum() > 0:\n        y = x * 1\n    else:\n    {arm}    return y\n"
        text = f"import torch\n\n\n@torch.no_grad()\ndef f(x):\n{body}"
        result = fix_text("m.py", text, RuleContext(threshold=Safety.SAFE), [DataDependentBranch(), ConditionalExpressionOnTensor()])
        assert result.text == text, (expr, result.text)
        unsafe = fix_text("m.py", text, RuleContext(threshold=Safety.UNSAFE), [DataDependentBranch(), ConditionalExpressionOnTensor()])
        assert unsafe.applied and all(f.safety is Safety.UNSAFE for f in unsafe.applied), expr


def test_a_dtype_shown_by_the_condition_keeps_the_select_safe():
    text = ("import torch\n\n\n@torch.no_grad()\ndef f(x):\n    if x.dtype == torch.float32 and x.sum() > 0:\n"
            "        y = -x\n    else:\n        y = x.abs()\n    return y\n")
    result = fix_text("m.py", text, RuleContext(threshold=Safety.SAFE), [DataDependentBranch()])
    assert "torch.where" in result.text, [d.reason for d in result.declined]
