"""Small realistic modules tried against GM101/GM402 predication: each is declined or the same program.

"The same program" is what a caller can see (values, requires_grad, identity with the arguments,
gradients of every leaf, the exception's type and first line), uncompiled and compiled with the
``eager`` and ``aot_eager`` backends, on inputs that take each outcome of the condition. A test marked
``xfail(strict=True)`` is a program the rules rewrite today that then computes something else (the
reason says what); it starts to pass, and so fails as strict, once the site is declined or the
rewrite is made exact.
"""

from __future__ import annotations

import pytest
import torch

from tests.transforms._side_effect_support import load_module, reset_dynamo
from tests.transforms.test_predication_soundness import _fix, _observe, _same

MODES = ("plain", "eager", "aot_eager")


def _declined_or_same(tmp_path, body: str, entry: str, inputs) -> None:
    """``inputs`` are zero-argument makers of fresh arguments, at least one per outcome."""
    text, result = _fix(body, dynamic=True)
    if not result.applied:
        assert result.declined and result.text == text
        return
    before, after = load_module(tmp_path, text), load_module(tmp_path, result.text)
    for make in inputs:
        for mode in MODES:
            seen = []
            for module in (before, after):
                torch.manual_seed(0)
                target = getattr(module, entry)
                fn = target() if isinstance(target, type) else target
                if mode != "plain":
                    reset_dynamo()
                    fn = torch.compile(fn, backend=mode)
                seen.append(_observe(fn, make()))
            _same(*seen, f"{entry}/{mode}/{make.__name__}")


def _grad(t: torch.Tensor) -> torch.Tensor:
    return t.clone().requires_grad_(True)


# --- holes: rewritten today, and then not the same program --------------------------------------


@pytest.mark.xfail(strict=True, reason="torch.where's result does not keep the taken arm's strides: a later .view() "
                                       "raises (or stops raising) after the rewrite")
@pytest.mark.parametrize("form", ["statement", "expression"])
def test_the_selected_value_keeps_the_strides_of_its_branch(tmp_path, form):
    """A head-merge after an optional transpose: the original `view` works on the contiguous branch."""
    site = {
        "statement": "if scores.sum() > 0:\n                out = heads * 2\n            else:\n"
                     "                out = heads.contiguous() + 1",
        "expression": "out = heads * 2 if scores.sum() > 0 else heads.contiguous() + 1",
    }[form]
    body = f"""
    class Merge(nn.Module):
        def forward(self, scores, values):
            heads = values.transpose(0, 1)
            {site}
            return out.view(-1)
    """

    def positive():
        return torch.ones(3), torch.arange(6.0).reshape(2, 3)

    def negative():
        return -torch.ones(3), torch.arange(6.0).reshape(2, 3)

    _declined_or_same(tmp_path, body, "Merge", [positive, negative])
