"""The dtype and non-finite lists of the shared effect analysis, each entry run against torch:
an op listed as raising (or warning) for a dtype class does so for that class and for no other,
an op listed as finite in backward gives a zero gradient through an unselected ``where`` arm
for +-inf and NaN operands, and a torch.nn module listed with its output classes returns exactly
those."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from graphmend.transforms import _dtypes as D
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
    assert tuple(_REPRESENTATIVES) == D.DTYPE_CLASSES


@pytest.mark.parametrize("name", sorted(D.DTYPE_RAISES))
def test_dtype_raises_entry_raises_for_exactly_its_classes(name):
    classes, call = D.DTYPE_RAISES[name]
    assert set(classes.split()) <= set(D.DTYPE_CLASSES)
    raised = {c for c in D.DTYPE_CLASSES if _run(call, c)[0]}
    assert raised == set(classes.split()), (name, call, raised)


@pytest.mark.parametrize("name", sorted(D.DTYPE_WARNS))
def test_dtype_warns_entry_warns_for_exactly_its_classes(name):
    classes, call = D.DTYPE_WARNS[name]
    warned = set()
    for c in D.DTYPE_CLASSES:
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


_DTYPES = {"bool": (torch.bool,), "int": (torch.int64, torch.int32, torch.uint8),
           "float": (torch.float32, torch.float16, torch.bfloat16, torch.float64), "complex": (torch.complex64,)}


def _class_of(dtype: torch.dtype) -> str:
    return next(c for c, ds in _DTYPES.items() if dtype in ds)


@pytest.mark.parametrize("name", sorted(D.MODULE_OUTPUTS))
def test_module_output_entry_gives_only_its_classes(name):
    """Built with every dtype it accepts and called with every input it accepts (with autograd on
    and off), the module's output is of exactly the listed classes; it cannot be converted to a
    bool or integer dtype."""
    classes, build, call = D.MODULE_OUTPUTS[name]
    seen = set()
    for built in [d for ds in _DTYPES.values() for d in ds]:
        try:
            module = eval(build, {"nn": torch.nn, "d": built})
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        for given in [d for ds in _DTYPES.values() for d in ds]:
            x = torch.tensor([0, 1, 2, 3, 1, 0, 2, 3]).to(given)
            for grad in (True, False):  # a complex Embedding raises with autograd on only
                try:
                    with warnings.catch_warnings(), torch.set_grad_enabled(grad):
                        warnings.simplefilter("ignore")
                        out = eval(f"m({call})", {"m": module, "x": x})
                except (RuntimeError, TypeError, NotImplementedError, IndexError):
                    continue
                seen.add(_class_of(out.dtype))
    assert seen == set(classes.split()), (name, seen)
    for target in (torch.int64, torch.bool):
        with pytest.raises(TypeError):
            eval(build, {"nn": torch.nn, "d": torch.float32}).to(target)


def test_weighted_modules_are_among_the_module_outputs():
    """A submodule whose `weight` the attribute reads accept is one whose output class is known."""
    from graphmend.transforms._reads import WEIGHTED

    assert WEIGHTED <= set(D.MODULE_OUTPUTS)



def test_module_arguments_are_the_leading_size_and_flag_parameters():
    """Each entry's vetted arguments are its constructor's leading parameters, in order (so a
    positional argument past them is refused), and none sets the dtype or the weight."""
    import inspect

    assert set(D.MODULE_ARGUMENTS) == set(D.MODULE_OUTPUTS)
    for name, vetted in D.MODULE_ARGUMENTS.items():
        params = list(inspect.signature(getattr(torch.nn, name).__init__).parameters)[1:]
        assert params[:len(vetted)] == list(vetted), name
        assert not {"device", "dtype"} & set(vetted) and not any(p.startswith("_") for p in vetted), name
