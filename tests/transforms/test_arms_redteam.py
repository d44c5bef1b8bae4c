"""Red team for the arm not taken (GM101/GM402): realistic modules where the rewrite is applied at
the default safety and ``torch.where``'s evaluation of the branch not taken raises or back-propagates
NaN because the dtype classes or the gradient sources the analysis inferred are wrong.

Each program goes through ``_declined_or_same`` (declined, or the same program uncompiled and
compiled with ``eager`` and ``aot_eager`` on inputs taking each outcome). A test marked
``xfail(strict=True)`` is rewritten today and then computes something else; the reason says what.
"""

from __future__ import annotations

import pytest
import torch

from tests.transforms._side_effect_support import load_module
from tests.transforms.test_predication_redteam import _declined_or_same, _grad
from tests.transforms.test_predication_soundness import _fix

_BINARISED = """
class Binarised(nn.Module):
    \"\"\"A projection whose activations a forward hook binarises (a straight-through probe).\"\"\"

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.proj.register_forward_hook(lambda module, args, out: out > 0)

    def forward(self, x):
        h = self.proj(x)
        if x.sum() > 0:
            h = 1 - h
        return h
"""


_LOOKUP = """
class MaskLookup(nn.Module):
    \"\"\"Per-token boolean masks looked up from a frozen table (an Embedding over a bool table).\"\"\"

    def __init__(self):
        super().__init__()
        table = torch.tensor([[True, False], [False, True], [True, True], [False, False]])
        self.proj = nn.Embedding(4, 2, _weight=table, _freeze=True)

    def forward(self, x):
        h = self.proj(x)
        if x.sum() > 0:
            h = 1 - h
        return h
"""


_HEADLESS = """
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        h = self.proj(x)
        if x.sum() > 0:
            h = 1 - h
        return h


class Headless(nn.Module):
    \"\"\"The usual transfer-learning move: the head's projection replaced by an Identity.\"\"\"

    def __init__(self):
        super().__init__()
        self.head = Head()
        self.head.proj = nn.Identity()

    def forward(self, x):
        return self.head(x)
"""


_PRUNED = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def prune(self):
        \"\"\"Drop the projection (pruning code writes the registry, as torch's own swap helpers do).\"\"\"
        self._modules["proj"] = nn.Identity()

    def forward(self, x):
        h = self.proj(x)
        if x.sum() > 0:
            h = 1 - h
        return h


class Pruned(Block):
    def __init__(self):
        super().__init__()
        self.prune()
"""


_HOOKED_OUTSIDE = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        h = self.proj(x)
        if x.sum() > 0:
            h = 1 - h
        return h


def binarise(block):
    \"\"\"Attach a probe that binarises the projection's activations.\"\"\"
    block.proj.register_forward_hook(lambda module, args, out: out > 0)
    return block


class Probed(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = binarise(Block())

    def forward(self, x):
        return self.block(x)
"""


_MASKS = [lambda: (torch.tensor([[False, False, False]]),), lambda: (torch.tensor([[True, False, True]]),)]


@pytest.mark.parametrize("text, name, inputs", [
    pytest.param(_BINARISED, "Binarised", [lambda: (torch.ones(2, 3),), lambda: (-torch.ones(2, 3),)],
                 id="a forward hook that changes the output dtype of a Linear"),
    pytest.param(_LOOKUP, "MaskLookup", [lambda: (torch.tensor([1, 2]),), lambda: (torch.tensor([0, 0]),)],
                 id="an Embedding over a frozen bool table"),
    pytest.param(_HEADLESS, "Headless", _MASKS, id="a submodule replaced from another class of the file"),
    pytest.param(_PRUNED, "Pruned", _MASKS, id="a submodule replaced through the module registry"),
    pytest.param(_HOOKED_OUTSIDE, "Probed", [lambda: (torch.ones(2, 3),), lambda: (-torch.ones(2, 3),)],
                 id="a forward hook registered from outside the class"),
])
def test_a_submodule_whose_dtype_is_changed_proves_nothing(tmp_path, text, name, inputs):
    """Each program changes what its projection returns (a hook, a bool table, a replacement):
    the submodule proves no dtype class, the site is declined and the program is unchanged."""
    assert not _fix(text, dynamic=True)[1].applied
    _declined_or_same(tmp_path, text, name, inputs)


_TEMPERATURES = """
class Temperature(nn.Module):
    \"\"\"A log-temperature kept as a buffer.\"\"\"

    def __init__(self{params}):
        super().__init__()
        {init}

    def forward(self, x):
        if x.sum() > 0:
            y = self.t.sqrt()
        else:
            y = self.t * 2
        return x + y
{more}
"""
# a learnable log-temperature: a buffer that requires grad (trained by its own optimizer)
_TEMPERATURE = _TEMPERATURES.format(params="", init='self.register_buffer("t", torch.zeros(3).requires_grad_())', more="")


def test_a_buffer_that_requires_grad_feeds_a_sqrt_not_taken(tmp_path):
    """A buffer made with requires_grad carries gradients: `self.t.sqrt()` at 0 (gradient inf)
    evaluated where not taken would back-propagate NaN into t.grad, so the site is declined."""
    text, result = _fix(_TEMPERATURE, dynamic=True)
    assert not result.applied
    grads = []
    for source in (text, result.text):
        m = load_module(tmp_path, source).Temperature()
        (m(-torch.ones(3))).sum().backward()
        grads.append(m.t.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0, equal_nan=False)


@pytest.mark.parametrize("after", ["self.t.requires_grad_()", "self.t.requires_grad = True",
                                   "for b in self.buffers():\n            b.requires_grad_()", ""])
def test_a_buffer_made_to_require_grad_after_its_registration(tmp_path, after):
    """The buffer is registered plain and made to require grad later: a gradient source, so the
    sqrt not taken is declined; the plain buffer alone is no gradient source (applied)."""
    body = _TEMPERATURE.replace("torch.zeros(3).requires_grad_()", "torch.zeros(3)").replace(
        "\n\n    def forward", f"\n        {after}\n\n    def forward", 1)
    text, result = _fix(body, dynamic=True)
    assert bool(result.applied) == (after == "")
    grads = []
    for source in (text, result.text):
        m = load_module(tmp_path, source).Temperature()
        if after:
            (m(-torch.ones(3))).sum().backward()
            grads.append(m.t.grad)
    if after:
        torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0, equal_nan=False)


# --- holding: declined, with the gradient context or the parameter seen -----------------------


@pytest.mark.parametrize("decorate", ["@torch.inference_mode(False)\n", "@torch.set_grad_enabled(True)\n", ""])
def test_a_decorator_that_keeps_gradients_on_leaves_a_sqrt_declined(tmp_path, decorate):
    body = decorate + """def f(x):
    if x.sum() > 0:
        y = x.sqrt()
    else:
        y = x * 2
    return y
"""
    assert not _fix(body, dynamic=True)[1].applied
    _declined_or_same(tmp_path, body, "f", [lambda: (_grad(torch.zeros(3)) - 1,), lambda: (_grad(torch.ones(3)),)])


def test_enable_grad_inside_a_no_grad_function_leaves_a_sqrt_declined():
    body = """
@torch.no_grad()
def f(x):
    with torch.enable_grad():
        if x.sum() > 0:
            y = x.sqrt()
        else:
            y = x * 2
    return y
"""
    assert not _fix(body, dynamic=True)[1].applied


def test_a_plain_tensor_attribute_that_requires_grad_is_a_gradient_source():
    """SAC's `self.log_alpha = torch.zeros(1, requires_grad=True)`: not a buffer, so it counts."""
    body = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_alpha = torch.zeros(3, requires_grad=True)

    def forward(self, x):
        if x.sum() > 0:
            y = self.log_alpha.exp()
        else:
            y = self.log_alpha * 2
        return x + y
"""
    assert not _fix(body, dynamic=True)[1].applied


_BLOCK = """
{prelude}
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = {module}
        {init}

    def forward(self, x):
        h = self.proj(x)
        {site}
        return y
"""
_REBOUND = _BLOCK.replace("{site}", "if x.sum() > 0:\n            y = 1 - h\n        else:\n            y = h * 1")


@pytest.mark.parametrize("prelude, module, init", [
    ("class BinaryLinear(nn.Linear):\n    def forward(self, x):\n        return super().forward(x) > 0\n",
     "BinaryLinear(3, 3)", ""),
    ("from torch.nn import Identity as Linear\n", "Linear(3, 3)", ""),
    ("", "nn.Linear(3, 3)", 'for name in ("proj",):\n            setattr(self, name, nn.Identity())'),
    ("", "nn.Linear(3, 3)", 'name = "proj"\n        self.add_module(name, nn.Identity())'),
    ("", "nn.Linear(3, 3)", "self.proj.forward = lambda x: x > 0"),
    ("", "nn.Linear(3, 3)", "self.proj.__class__ = nn.Identity"),
    ("", "nn.Embedding.from_pretrained(torch.tensor([[True, False], [False, True]]))", ""),
], ids=["Linear subclass", "Identity imported as Linear", "setattr by a variable", "add_module by a variable",
        "forward replaced", "class swapped", "Embedding.from_pretrained"])
def test_a_submodule_whose_output_may_be_bool_proves_no_dtype(tmp_path, prelude, module, init):
    """Each of these may return a bool tensor at run time (an Identity given a mask), on which
    `1 - h` raises: declined."""
    body = _REBOUND.format(prelude=prelude, module=module, init=init)
    text, result = _fix(body, dynamic=True)
    assert not result.applied and result.text == text
    proj = load_module(tmp_path, text).Block().proj
    given = [torch.tensor([0, 1])] if "Embedding" in module else [torch.ones(2, 3), torch.ones(2, 3) > 0]
    dtypes = []
    for x in given:
        try:
            dtypes.append(proj(x).dtype)
        except RuntimeError:  # a Linear given a mask
            pass
    assert torch.bool in dtypes, dtypes


@pytest.mark.parametrize("prelude, module, init, applied", [
    ("", "nn.Linear(3, 3)", "", True),
    ("", "nn.Linear(3, 3, dtype=torch.float64)", "", False),
    ("", "nn.Linear(3, 3, True, None, torch.float64)", "", False),
    ("", "nn.Linear(*(3, 3))", "", False),
    ("nn.Linear.forward = lambda self, x: x > 0\n", "nn.Linear(3, 3)", "", False),
    ("def swap(block, name):\n    setattr(block, name, nn.Identity())\n", "nn.Linear(3, 3)", "", False),
    ("def hook(m):\n    torch.nn.modules.module.register_module_forward_hook(lambda *a: None)\n", "nn.Linear(3, 3)", "",
     False),
    ("", "nn.Linear(3, 3)", "self.proj.register_forward_pre_hook(lambda m, a: None)", False),
], ids=["plain", "dtype=", "dtype by position", "star arguments", "torch.nn patched", "setattr elsewhere",
        "global module hook", "pre-hook"])
def test_what_keeps_a_submodule_from_proving_its_dtype(prelude, module, init, applied):
    """The plain Linear proves float/complex (`1 - h` cannot raise: applied); a constructor argument
    the table was not vetted for, a patched torch.nn, a store by a computed name or a hook anywhere
    in the file leaves no proof (declined)."""
    body = _REBOUND.format(prelude=prelude, module=module, init=init)
    assert bool(_fix(body, dynamic=True)[1].applied) == applied
