"""``graphmend verify`` catches each predication that GM101/GM402 now decline, when it is forced.

One real repository, real Dynamo on CPU (backend ``eager``), real git. Each target's source is
rewritten by hand the way the rules used to rewrite it (as a forced ``--unsafe-fixes`` or a hand
edit would), and verify must report the difference:

- ``autograd``: an arm that draws its gradient from a parameter the other arm does not use (the
  parameter gets a zero gradient instead of None); a Parameter the original returns itself on one
  path (the select returns a new tensor); ``(x * 1e30) * x`` in the arm not taken (NaN gradients);
- ``ambiguous``: a condition of several elements, reshaped to ``()``: another error message.
"""

from __future__ import annotations

import pytest

from tests.verify.repo_files import targets_config, verify_forced

pytestmark = pytest.mark.xdist_group("predication_verify")

MODEL = '''\
import torch


class Autograd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((3,), 0.5))
        self.weight = torch.nn.Parameter(torch.ones(3))

    def forward(self, x, gate):
        y = x * 2 if gate.sum() > 0 else gate * self.w
        p = self.weight if gate.sum() > 0 else self.weight * 2
        if x.sum() > 0:
            z = x * 2
        else:
            z = (x * 1e30) * x
        return y, p, z


class Ambiguous(torch.nn.Module):
    def forward(self, x):
        if x > 0:
            y = x * 2
        else:
            y = x - 1
        return y
'''

WRONG = {
    "        y = x * 2 if gate.sum() > 0 else gate * self.w\n":
        "        y = torch.where(gate.sum() > 0, x * 2, gate * self.w)\n",
    "        p = self.weight if gate.sum() > 0 else self.weight * 2\n":
        "        p = torch.where(gate.sum() > 0, self.weight, self.weight * 2)\n",
    "        if x.sum() > 0:\n            z = x * 2\n        else:\n            z = (x * 1e30) * x\n":
        "        z = torch.where(x.sum() > 0, x * 2, (x * 1e30) * x)\n",
    "        if x > 0:\n            y = x * 2\n        else:\n            y = x - 1\n":
        "        y = torch.where((x > 0).bool().reshape(()), x * 2, x - 1)\n",
}

TARGETS = '''\
import torch

from pkg import model


def autograd(dtype=torch.float32, device="cpu"):
    return model.Autograd(), (torch.tensor([1.0e10, 2.0, 3.0], dtype=dtype), torch.ones(3, dtype=dtype))


def ambiguous(dtype=torch.float32, device="cpu"):
    return model.Ambiguous(), (torch.tensor([1.0, 2.0, 3.0], dtype=dtype),)
'''

CONFIG = targets_config(("autograd", "ambiguous"), "eager")


def test_each_forced_predication_is_caught(make_repo):
    report = verify_forced(make_repo, MODEL, TARGETS, CONFIG, WRONG, grad=True)
    by = {t.name: t for t in report.targets}
    details = {n: " | ".join(f"{m.kind}/{m.check}: {m.detail}" for m in t.mismatches) for n, t in by.items()}
    assert all(not t.ok for t in by.values()), details
    found = details["autograd"]
    # `w` gets a (zero) gradient where the original left it None
    assert "'grad:w'" in found, found
    # the original returned its Parameter itself on this path
    assert "out[1].type: '<absent>' != 'torch.nn.parameter.Parameter'" in found, found
    assert "out[1].autograd: 'computed' != 'leaf'" in found, found
    # NaN gradients through the arm not taken
    assert "grad:args[0]: max abs error inf" in found, found
    # the condition's error message
    assert "ambiguous" in details["ambiguous"] and "exception/eager" in details["ambiguous"], details["ambiguous"]


def test_outputs_carry_type_and_autograd_facts_and_inputs_do_not():
    import torch

    from graphmend.verify.observe import flatten

    weight = torch.nn.Parameter(torch.ones(2))
    plain = torch.ones(2)
    out = dict(flatten((weight, weight * 2, plain)))
    assert out["out[0].type"] == "torch.nn.parameter.Parameter" and out["out[0].autograd"] == "leaf"
    assert out["out[1].autograd"] == "computed" and "out[1].type" not in out
    assert [k for k in out if k.startswith("out[2]")] == ["out[2]"]  # a plain tensor: values only
    # arguments are compared by value only (verify makes them require grad itself)
    assert [k for k, _ in flatten((weight,), "args")] == ["args[0]"]
