"""The dtype and non-finite lists of the shared effect analysis, each entry run against torch:
an op listed as raising (or warning) for a dtype class does so for that class and for no other,
and an op listed as finite in backward gives a zero gradient through an unselected ``where`` arm
for +-inf and NaN operands."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from graphmend.transforms import _effects as E

# One tensor of each dtype class (the classes the lists speak of).
_REPRESENTATIVES = {
    "bool": lambda: torch.tensor([True, False]),
    "int": lambda: torch.tensor([3, 0]),
    "float": lambda: torch.tensor([1.5, 0.0]),
    "complex": lambda: torch.tensor([1 + 1j, 0j]),
}


def _run(call: str, dtype_class: str) -> tuple[bool, list[str]]:
    """(raised, warnings) of one call on the representative of ``dtype_class``."""
    torch.set_warn_always(True)  # torch warns some things once per process otherwise
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                eval(call, {"torch": torch, "F": F, "x": _REPRESENTATIVES[dtype_class]()})
                raised = False
            except (RuntimeError, NotImplementedError, TypeError):
                raised = True
    finally:
        torch.set_warn_always(False)
    return raised, [str(w.message) for w in seen]


def test_the_classes_are_the_representatives():
    assert tuple(_REPRESENTATIVES) == E.DTYPE_CLASSES


@pytest.mark.parametrize("name", sorted(E.DTYPE_RAISES))
def test_dtype_raises_entry_raises_for_exactly_its_classes(name):
    classes, call = E.DTYPE_RAISES[name]
    assert set(classes.split()) <= set(E.DTYPE_CLASSES)
    raised = {c for c in E.DTYPE_CLASSES if _run(call, c)[0]}
    assert raised == set(classes.split()), (name, call, raised)


@pytest.mark.parametrize("name", sorted(E.DTYPE_WARNS))
def test_dtype_warns_entry_warns_for_exactly_its_classes(name):
    classes, call = E.DTYPE_WARNS[name]
    warned = set()
    for c in E.DTYPE_CLASSES:
        raised, seen = _run(call, c)
        assert not raised, (name, c)
        if seen:
            warned.add(c)
    assert warned == set(classes.split()), (name, call, warned)


@pytest.mark.parametrize("name", sorted(E.FINITE_GRAD_FUNCS))
def test_finite_grad_entry_gives_a_zero_gradient_through_the_unselected_arm(name):
    for bad in (float("inf"), float("-inf"), float("nan")):
        x = torch.tensor([[bad, 1.0, -2.0]], requires_grad=True)
        out = eval(E.FINITE_GRAD_FUNCS[name], {"torch": torch, "F": F, "x": x})
        unselected = torch.where(torch.zeros(out.shape, dtype=torch.bool), out, torch.zeros((), dtype=out.dtype))
        unselected.float().sum().backward()
        assert torch.equal(x.grad, torch.zeros_like(x)), (name, bad, x.grad)


@pytest.mark.parametrize("call", ["x * x", "x.square()", "x.tanh()", "x.sigmoid()", "x.exp()", "F.gelu(x)", "x.amax()", "x.norm()"])
def test_an_op_off_the_finite_grad_list_can_give_nan_through_the_unselected_arm(call):
    """Why the list is a whitelist: these common ops are NaN in backward for some non-finite input."""
    name = call.split("(")[0].split(".")[-1]
    assert name not in E.FINITE_GRAD_FUNCS
    nan = False
    for bad in (float("inf"), float("-inf"), float("nan")):
        x = torch.tensor([[bad, 1.0]], requires_grad=True)
        out = eval(call, {"torch": torch, "F": F, "x": x})
        torch.where(torch.zeros(out.shape, dtype=torch.bool), out, torch.zeros(())).sum().backward()
        nan = nan or bool(x.grad.isnan().any())
    assert nan, call
