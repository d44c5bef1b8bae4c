"""Red team for the arm not taken (GM101/GM402), second round: a submodule's dtype class
(``_reads.Reads.output_classes``) and the buffers that are no gradient source
(``_effects._buffers``), attacked with code of the same file that the proofs did not see.

Each program is either declined or the same program (``_declined_or_same``: uncompiled and
compiled with ``eager`` and ``aot_eager`` on inputs taking each outcome); a buffer program's
gradients are compared after a backward through the branch not taken. Each was rewritten and
then computed something else before the proofs learned to see it.
"""

from __future__ import annotations

import pytest
import torch

from tests.transforms._side_effect_support import load_module
from tests.transforms.test_arms_redteam import _BLOCK, _TEMPERATURES
from tests.transforms.test_predication_redteam import _declined_or_same
from tests.transforms.test_predication_soundness import _fix

SITES = {
    "statement": "if x.sum() > 0:\n            y = 1 - h\n        else:\n            y = h.clone()",
    "expression": "y = 1 - h if x.sum() > 0 else h.clone()",
}

_BINARISE = """
def binarise(m):
    \"\"\"Turn an embedding table into a frozen binary one (a hashing-trick probe).\"\"\"
    if isinstance(m, nn.Embedding):
        m.weight.requires_grad_(False)
        m.weight.data = m.weight.data > 0
"""

_MASK = """
from torch.nn import Linear


class Mask(nn.Module):
    \"\"\"A stand-in that keeps the sign pattern only (the probe build's projection).\"\"\"

    def __init__(self, *sizes):
        super().__init__()

    def forward(self, x):
        return x > 0


Linear = Mask
"""

_SIGN = """
class Sign(nn.Module):
    def forward(self, x):
        return x > 0
"""

# Code of the file that changes what `self.proj(x)` returns without a `self.proj = ...`, a hook
# registered by name or a store to an attribute named `proj`: each makes it a bool tensor (or a
# float8 one, on which `1 - h` raises too), where the branch not taken computes `1 - h`.
RETOUCHED = {
    "setattr on the submodule": ("", "nn.Linear(3, 3)", 'setattr(self.proj, "forward", lambda x: x > 0)'),
    "a local name for the submodule": (
        "", "nn.Embedding(4, 3)",
        "proj = self.proj\n        proj.weight = nn.Parameter(torch.ones(4, 3) > 0, requires_grad=False)"),
    "Module.type": ("", "nn.Embedding(4, 3)", "self.proj.requires_grad_(False)\n        self.proj.type(torch.bool)"),
    "a float8 table": ("", "nn.Embedding(4, 3)", "self.proj.requires_grad_(False)\n        self.proj.to(torch.float8_e4m3fn)"),
    "Module.apply": (_BINARISE, "nn.Embedding(4, 3)", "self.apply(binarise)"),
    "a hook registrar under a local name": (
        "", "nn.Linear(3, 3)", "on_output = self.proj.register_forward_hook\n        on_output(lambda m, a, out: out > 0)"),
    "a hook registrar by getattr": (
        "", "nn.Linear(3, 3)", 'getattr(self.proj, "register_forward_hook")(lambda m, a, out: out > 0)'),
    "forward replaced through vars()": ("", "nn.Linear(3, 3)", "vars(self.proj).update(forward=lambda x: x > 0)"),
    "a global hook imported under another name": (
        "from torch.nn.modules.module import register_module_forward_hook as on_every_forward\n", "nn.Linear(3, 3)",
        "self.probe = on_every_forward(lambda m, a, out: out > 0 if isinstance(m, nn.Linear) else out)"),
    "torch.nn's name rebound in the file": (_MASK, "Linear(3, 3)", ""),
    "torch.nn's name rebound in __init__": (
        _SIGN, "torch.nn.Linear(3, 3)",
        "import types\n        nn = types.SimpleNamespace(Linear=lambda *sizes: Sign())  # the probe build\n"
        "        self.proj = nn.Linear(3, 3)"),
    "the registry through __dict__": (_SIGN, "nn.Linear(3, 3)", 'self.__dict__["_modules"]["proj"] = Sign()'),
}


@pytest.fixture
def global_hooks():
    """The program may register a global module hook: it goes with the test."""
    hooks = torch.nn.modules.module._global_forward_hooks
    before = dict(hooks)
    yield
    hooks.clear()
    hooks.update(before)


@pytest.mark.parametrize("form", sorted(SITES))
@pytest.mark.parametrize("case", list(RETOUCHED))
def test_a_submodule_changed_by_other_code_of_the_file(tmp_path, global_hooks, case, form):
    """Code of the same file changes what `self.proj(x)` returns without a store to an attribute
    named `proj` or a hook registered by name: the submodule proves no dtype class, and `1 - h`
    (which raises on the bool or float8 output) stays declined."""
    prelude, module, init = RETOUCHED[case]
    body = _BLOCK.format(prelude=prelude, module=module, init=init, site=SITES[form])
    if "Embedding" in module:
        inputs = [lambda: (torch.tensor([0, 0]),), lambda: (torch.tensor([1, 2]),)]
    else:
        inputs = [lambda: (-torch.ones(2, 3),), lambda: (torch.ones(2, 3),)]
    proj = load_module(tmp_path, _fix(body, dynamic=True)[0]).Block().proj
    assert proj(*inputs[0]()).dtype in (torch.bool, torch.float8_e4m3fn)  # the program itself
    _declined_or_same(tmp_path, body, "Block", inputs)


@pytest.mark.parametrize("init", ["self.proj.half()", "self.proj.double()", "self.proj.to(torch.complex64)",
                                  "self.proj.requires_grad_(False)"])
def test_a_linear_converted_to_another_float_or_complex_dtype_stays_the_same_program(tmp_path, init):
    """Casts to a floating or complex dtype of the float32 kind keep `1 - h` defined, so either
    answer (rewritten or declined) keeps the program."""
    body = _BLOCK.format(prelude="", module="nn.Linear(3, 3)", init=init, site=SITES["statement"])
    dtype = torch.complex64 if "complex" in init else torch.float16 if "half" in init \
        else torch.float64 if "double" in init else torch.float32
    _declined_or_same(tmp_path, body, "Block", [lambda: (-torch.ones(2, 3, dtype=dtype),),
                                                lambda: (torch.ones(2, 3, dtype=dtype),)])


# --- buffers made to require grad where _buffers does not look --------------------------------


_LEARNABLE = """

class Learnable(Temperature):
    \"\"\"The same temperature, trained.\"\"\"

    def __init__(self):
        super().__init__()
        self.t.requires_grad_()
"""

_MADE = """

def learnable():
    model = Temperature()
    model.t.requires_grad_()
    return model
"""

_GIVEN = """

def learnable():
    return Temperature(torch.zeros(3, requires_grad=True))
"""

PLAIN = 'self.register_buffer("t", torch.zeros(3))'
# (constructor parameters, __init__ body, more code, the entry that builds the model)
GRAD_BUFFERS = {
    "requires_grad=True on a name registered": (
        "", 't = torch.zeros(3, requires_grad=True)\n        self.register_buffer("t", t)', "", "Temperature"),
    "a Parameter registered as a buffer": (
        "", 'p = nn.Parameter(torch.zeros(3))\n        self.register_buffer("t", p)', "", "Temperature"),
    "a constructor argument registered": (", init", 'self.register_buffer("t", init)', _GIVEN, "learnable"),
    "a subclass makes it require grad": ("", PLAIN, _LEARNABLE, "Learnable"),
    "a function of the file makes it require grad": ("", PLAIN, _MADE, "learnable"),
    "setattr(..., 'requires_grad', True)": ("", PLAIN + '\n        setattr(self.t, "requires_grad", True)', "",
                                            "Temperature"),
    "requires_grad |= True": ("", PLAIN + "\n        self.t.requires_grad |= True", "", "Temperature"),
    "the _buffers registry": ("", PLAIN + '\n        self._buffers["t"] = torch.zeros(3, requires_grad=True)', "",
                              "Temperature"),
}


def _buffer_grads(tmp_path, body: str, entry: str) -> list:
    """t.grad after a backward through the branch not taken (t = 0: sqrt's gradient is inf), of
    the original and of the fixed program."""
    text, result = _fix(body, dynamic=True)
    grads = []
    for source in (text, result.text):
        model = getattr(load_module(tmp_path, source), entry)()
        assert model.t.requires_grad  # the program itself
        model(-torch.ones(3)).sum().backward()
        grads.append(model.t.grad)
    return grads


@pytest.mark.parametrize("case", list(GRAD_BUFFERS))
def test_a_buffer_made_to_require_grad_where_the_class_does_not_say(tmp_path, case):
    """A tensor given by name or argument, a subclass or a function of the file, setattr, |= or
    the _buffers registry make the buffer a gradient source: `self.t.sqrt()` not taken would
    back-propagate NaN into t.grad, so the site is declined."""
    params, init, more, entry = GRAD_BUFFERS[case]
    body = _TEMPERATURES.format(params=params, init=init, more=more)
    before, after = _buffer_grads(tmp_path, body, entry)
    torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=False)


@pytest.mark.parametrize("init", [
    PLAIN, 'self.register_buffer("t", torch.zeros(3).float(), persistent=False)',
    'inv_freq = 1.0 / (10000 ** (torch.arange(0, 6, 2).float() / 6))\n        self.register_buffer("t", inv_freq * 0.0)',
], ids=["factory", "converted", "computed in a local (rotary frequencies)"])
def test_a_plain_buffer_is_state_and_the_sqrt_is_rewritten(init):
    """A buffer nothing asks to require grad is no gradient source: the common fix stays."""
    body = _TEMPERATURES.format(params="", init=init, more="")
    assert _fix(body, dynamic=True)[1].applied
