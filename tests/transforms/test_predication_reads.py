"""What a predicated site (GM101, GM402) reads where the original did not: attribute reads.

``torch.where`` computes both values and the layout guard reads every operand first, so an
attribute read of the branch not taken runs on every call. Each program below reads something
in one branch only that may raise or run code when its branch is not taken (a getter, an
attribute of None, a gradient before backward, an attribute set only by another method, a
short list, a missing key); each is declined with a reason naming the read, and the program
(left as it was) behaves as before on the path that never reads it, eager and compiled. The
reads :mod:`graphmend.transforms._reads` accepts are rewritten and behave identically, eager
and compiled (eager and aot_eager backends); its vetted lists are checked against torch.
"""

from __future__ import annotations

import contextlib
import io

import libcst as cst
import pytest
import torch
from torch import nn

from graphmend.model import Safety
from graphmend.transforms import _analysis as A
from graphmend.transforms import _reads as R
from graphmend.transforms.base import RuleContext
from graphmend.transforms.conditional_expression_on_tensor import ConditionalExpressionOnTensor
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text
from tests.transforms._side_effect_support import load_module

HEADER = "import torch\nfrom torch import nn\n\n\n"

CLASS = HEADER + '''class M(nn.Module):
    def __init__(self):
        super().__init__()
{init}

{extra}
    @torch.no_grad()
    def forward(self, x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = {read}
        return y
'''


def _program(read: str, init: str = "        pass", extra: str = "") -> str:
    return CLASS.format(read=read, init=init, extra=extra)


def _fix(text: str):
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ") or " if " in line]
    # unsafe fixes included: an operand that may not broadcast makes a site unsafe, not wrong
    return fix_text("m.py", text, RuleContext(verified=True, threshold=Safety.UNSAFE),
                    [DataDependentBranch(), ConditionalExpressionOnTensor()], {"GM101": lines, "GM402": lines})


def _outcome(model, x):
    """Value (or exception type), stdout and the random generator's next draw after the call."""
    out = io.StringIO()
    torch.manual_seed(0)
    with contextlib.redirect_stdout(out):
        try:
            value = ("value", model(x).tolist())
        except Exception as exc:  # what the program does, raise included
            value = ("raised", type(exc).__name__)
    return value, out.getvalue(), torch.rand(1).item()


def _same(tmp_path, text: str, new: str, inputs) -> None:
    for backend in (None, "eager", "aot_eager"):
        models = []
        for t in (text, new):
            module = load_module(tmp_path, t, "gm_reads")
            torch.manual_seed(0)  # the same initial weights
            models.append(module.M())
        if backend is not None:
            torch._dynamo.reset()
            models = [torch.compile(m, backend=backend) for m in models]
        for x in inputs:
            assert _outcome(models[1], x) == _outcome(models[0], x), (backend, x)


# name -> (program, piece of the reason); the branch with the read is never taken below (x > 0).
# Each but "getattr by name", "a missing key" and the hasattr one (declined before, kept as siblings) was rewritten
# before this check existed.
DECLINED = {
    "getattr by name": (_program("getattr(self, 'cache') * 2"), "getattr()"),
    "attribute of a None attribute": (_program("self.memory.keys * 2", "        self.memory = None"), "`self.memory.keys`"),
    "a None attribute in arithmetic": (_program("x * self.scale", "        self.scale = None"), "`self.scale`"),
    "set only by another method": (
        _program("x * self.mask", "        pass", "    def set_mask(self, m):\n        self.mask = m\n"), "`self.mask`"),
    "set under a condition in __init__": (
        _program("x * self.mask", "        if False:\n            self.mask = torch.ones(3)"), "`self.mask`"),
    "a short list": (_program("x * self.gains[2]", "        self.gains = [torch.ones(3)]"), "self.gains"),
    "a missing key": (_program("x * self.cache['k']", "        self.cache = {}"), "self.cache"),
    "a gradient before backward": (
        _program("x * self.w.grad", "        self.w = nn.Parameter(torch.ones(3))"), "a gradient is None"),
    "a submodule's optional bias": (_program("x * self.norm.bias", "        self.norm = nn.LayerNorm(3, bias=False)"),
                                    "`self.norm.bias`"),
    "a property that prints": (
        _program("self.scaled * 2", "        self.register_buffer('base', torch.ones(3))",
                 "    @property\n    def scaled(self):\n        print('read')\n        return self.base\n"),
        "reads property `scaled`, whose getter runs on every read"),
    "a cached_property": (
        "import functools\n" + _program(
            "self.scaled * 2", "        self.register_buffer('base', torch.ones(3))",
            "    @functools.cached_property\n    def scaled(self):\n        print('read')\n        return self.base\n"),
        "descriptor other than a plain property"),
    "a class with __getattr__": (
        _program("x * self.w", "        self.w = torch.ones(3)",
                 "    def __getattr__(self, name):\n        print('read', name)\n        return super().__getattr__(name)\n"),
        "defines __getattr__"),
    "a subclass sets it to None": (
        _program("x * self.w", "        self.w = torch.ones(3)")
        + "\n\nclass N(M):\n    def __init__(self):\n        super().__init__()\n        self.w = None\n", "`self.w`"),
    "hasattr on a property in a static part": (
        _program("x * 3", "        self.register_buffer('base', torch.ones(3))",
                 "    @property\n    def scaled(self):\n        print('read')\n        return self.base\n")
        .replace("if x.sum() > 0:", "if hasattr(self, 'scaled') and x.sum() > 0:"),
        "hasattr()"),
    "imag of a real tensor": (_program("x.imag * 2"), "`.imag` raises"),
    "an attribute of another object": (
        HEADER + "@torch.no_grad()\ndef f(x, out):\n    if x.sum() > 0:\n        y = x * 2\n    else:\n        y = out.logits * 2\n"
        "    return y\n", "`out.logits`"),
    "an attribute of a computed value": (_program("torch.max(x, 0).values * 2"), "torch.max"),
    "GM402: a property": (
        HEADER + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('base', torch.ones(3))\n\n    @property\n    def scaled(self):\n"
        "        print('read')\n        return self.base\n\n    @torch.no_grad()\n    def forward(self, x):\n"
        "        return x * 2 if x.sum() > 0 else self.scaled * 2\n", "reads property `scaled`"),
    "GM402: an attribute of None": (
        HEADER + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.memory = None\n\n"
        "    @torch.no_grad()\n    def forward(self, x):\n        return x * 2 if x.sum() > 0 else self.memory.keys * 2\n",
        "`self.memory.keys`"),
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_a_read_that_may_raise_or_run_code_is_declined(name, tmp_path):
    text, reason = DECLINED[name]
    result = _fix(text)
    assert result.applied == (), name
    assert any(reason in d.reason for d in result.declined), [d.reason for d in result.declined]
    if "class M(" in text:  # the program is unchanged: the branch that reads it never runs here
        model = load_module(tmp_path, text, "gm_reads").M()
        assert _outcome(model, torch.ones(3))[0] == ("value", [2.0, 2.0, 2.0])


# name -> (program, text the rewrite must contain)
ACCEPTED = {
    "a parameter": (_program("x * self.w", "        self.w = nn.Parameter(torch.full((3,), 3.0))"), "self.w"),
    "a registered buffer and its dtype": (
        _program("(x * self.b).to(self.b.dtype)", "        self.register_buffer('b', torch.full((3,), 5.0))"), "self.b"),
    "a number set in __init__": (_program("x * self.eps", "        self.eps = 0.5"), "self.eps"),
    "a Linear's weight": (_program("x * self.proj.weight.sum(0)", "        self.proj = nn.Linear(3, 2, bias=False)"),
                          "self.proj.weight"),
    "torch's constants": (_program("x.to(torch.float64) * torch.pi"), "x"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_read_that_cannot_raise_is_rewritten_and_behaves_the_same(name, tmp_path):
    text, shown = ACCEPTED[name]
    result = _fix(text)
    assert [f.rule for f in result.applied] == ["GM101"], [d.reason for d in result.declined]
    assert "_graphmend_strided(" in result.text and shown in result.text.split("_graphmend_strided(", 2)[-1]
    _same(tmp_path, text, result.text, [torch.ones(3), -torch.ones(3)])


def test_weighted_modules_always_have_a_weight_parameter():
    made = {
        "Linear": lambda **kw: nn.Linear(2, 3, **kw), "Bilinear": lambda **kw: nn.Bilinear(2, 2, 3, **kw),
        "Embedding": lambda **kw: nn.Embedding(3, 2), "EmbeddingBag": lambda **kw: nn.EmbeddingBag(3, 2),
        **{f"Conv{k}d": (lambda k: lambda **kw: getattr(nn, f"Conv{k}d")(1, 1, 1, **kw))(k) for k in (1, 2, 3)},
        **{f"ConvTranspose{k}d": (lambda k: lambda **kw: getattr(nn, f"ConvTranspose{k}d")(1, 1, 1, **kw))(k)
           for k in (1, 2, 3)},
    }
    assert set(made) == R.WEIGHTED
    for name, make in made.items():
        for kw in ({}, {"bias": False}) if name not in ("Embedding", "EmbeddingBag") else ({},):
            assert isinstance(make(**kw).weight, nn.Parameter), (name, kw)


def test_tensor_attributes_exist_on_every_tensor():
    for t in (torch.ones(2, 3), torch.ones((2, 2), dtype=torch.int64), torch.ones((2, 1), dtype=torch.bool)):
        for name in R.TENSOR_ATTRS:
            getattr(t, name)  # raises if one did not exist
    # these depend on the rank: shape_fallible makes a site that reads them unsafe
    for name in ("mT", "mH", "H"):
        with pytest.raises(RuntimeError):
            getattr(torch.ones(3), name)
    assert {"T", "mT", "H", "mH"} == A.RANK_ATTRS and A.shape_fallible(cst.parse_expression("x.mT"), A._Torch())
    with pytest.raises(RuntimeError):
        torch.ones(3).imag  # why `imag` is not among them  # noqa: B018
    assert torch.ones(3, requires_grad=True).grad is None  # why `grad` is not among them


def test_factories_and_methods_give_one_tensor():
    t = torch
    for name in R.TENSOR_FACTORIES:
        args = {"tensor": ([1.0],), "as_tensor": ([1.0],), "eye": (2,), "arange": (3,), "linspace": (0, 1, 3),
                "logspace": (0, 1, 3), "randint": (3, (2,)), "randperm": (3,), "full": ((2,), 1.0),
                "cat": ([t.ones(2)],), "stack": ([t.ones(2)],), "tril": (t.ones(2, 2),), "triu": (t.ones(2, 2),)}
        like = (t.ones(2),) + ((1.0,) if name == "full_like" else ())
        value = getattr(t, name)(*args.get(name, like if name.endswith("_like") else ((2,))))
        assert isinstance(value, torch.Tensor), name
    for name in R.TENSOR_METHODS:
        extra = {"to": (torch.float64,), "view": (-1,), "reshape": (-1,), "transpose": (0, 1), "permute": (1, 0),
                 "expand": (2, 2), "mul": (2,), "add": (2,), "sub": (2,), "unsqueeze": (0,)}
        assert isinstance(getattr(torch.ones(2, 2), name)(*extra.get(name, ())), torch.Tensor), name
