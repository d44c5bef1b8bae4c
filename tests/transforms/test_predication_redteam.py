"""Small realistic modules tried against GM101/GM402 predication: each is declined or the same program.

"The same program" is what a caller can see (values, requires_grad, identity with the arguments,
gradients of every leaf, the exception's type and first line), uncompiled and compiled with the
``eager`` and ``aot_eager`` backends, on inputs that take each outcome of the condition. A test marked
``xfail(strict=True)`` is a program the rules rewrite today that then computes something else (the
reason says what); it starts to pass, and so fails as strict, once the site is declined or the
rewrite is made exact.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.transforms._side_effect_support import load_module, reset_dynamo
from tests.transforms.test_predication_soundness import _fix, _observe, _same

MODES = ("plain", "eager", "aot_eager")


def _declined_or_same(tmp_path, body: str, entry: str, inputs, observe=_observe, also=None) -> None:
    """``inputs`` are zero-argument makers of fresh arguments, at least one per outcome. Each call
    is seen through ``observe``; ``also(before, after, what)``, when given, compares what
    :func:`_same` does not."""
    text, result = _fix(body, dynamic=True)
    if not result.applied:  # declined, or left for --unsafe-fixes
        assert result.text == text
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
                seen.append(observe(fn, make()))
            what = f"{entry}/{mode}/{make.__name__}\n{result.text}"
            _same(*seen, what)
            if also is not None:
                also(*seen, what)


def _grad(t: torch.Tensor) -> torch.Tensor:
    return t.clone().requires_grad_(True)


# --- holes: rewritten today, and then not the same program --------------------------------------


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


@pytest.mark.parametrize("arm", ["s * s", "s.square()"])
def test_a_product_with_a_masked_input_in_the_branch_not_taken(tmp_path, arm):
    """Scores with an additive -inf mask: the product is finite only where its factors are."""
    body = f"""
    def gate(scores, mask):
        s = scores + mask
        if scores.sum() > 0:
            y = {arm}
        else:
            y = s * 0.5
        return y
    """

    def positive():
        return _grad(torch.ones(2, 3)), torch.tensor([[0.0, float("-inf"), 0.0], [0.0, 0.0, float("-inf")]])

    def negative():
        return _grad(-torch.ones(2, 3)), torch.tensor([[0.0, float("-inf"), 0.0], [0.0, 0.0, float("-inf")]])

    _declined_or_same(tmp_path, body, "gate", [positive, negative])


@pytest.mark.parametrize("arm", ["h.clamp(min=0.0)", "h.clamp(-1.0, 1.0)"])
def test_a_tensor_saved_by_the_branch_not_taken_and_updated_in_place_later(tmp_path, arm):
    """A residual stream updated in place after an optional squash of a normalised copy (the
    condition reads `h`, so `h` is not complex and `clamp` cannot raise; arms finite in backward
    for any input, so only the saved tensor is at stake)."""
    body = f"""
    def block(x):
        h = x * 3
        if h.sum() > 0:
            y = h * 2
        else:
            y = {arm}
        h.add_(1)
        return y + h
    """

    def positive():
        return (_grad(torch.ones(2, 3)),)

    def negative():
        return (_grad(-torch.ones(2, 3)),)

    _declined_or_same(tmp_path, body, "block", [positive, negative])


@pytest.mark.parametrize("form", ["assignment", "call"])
def test_a_printed_value_that_requires_grad_prints_the_same(tmp_path, form, capsys):
    """Debug prints of activations during training: the text printed is part of the program."""
    site = {
        "assignment": "if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x * 3\n    print(y)",
        "call": "if x.sum() > 0:\n        print(x * 2)\n    else:\n        print(x * 3)\n    y = x + 1",
    }[form]
    body = f"""
def show(x):
    {site}
    return y
"""
    text, result = _fix(body, dynamic=True)
    printed = []
    for source in ([text, result.text] if result.applied else [text, text]):
        fn = load_module(tmp_path, source).show
        for sign in (1.0, -1.0):
            fn(_grad(torch.full((2,), sign)))
        printed.append(capsys.readouterr().out)
    assert "grad_fn=<MulBackward0>" in printed[0]
    assert printed[1] == printed[0]


class _Partial(torch.Tensor):
    """A tensor subclass that implements only some ops (as wrapper subclasses of quantisation and
    sharding libraries do): `sub` is not one of them."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.sub or func is torch.Tensor.__sub__:
            raise NotImplementedError("_Partial has no sub")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_runs_only_the_branch_taken(tmp_path):
    body = """
def f(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return y
"""
    text, result = _fix(body, dynamic=True)
    before = load_module(tmp_path, text).f
    after = load_module(tmp_path, result.text).f
    positive = torch.ones(3).as_subclass(_Partial)
    assert before(positive).tolist() == [2.0, 2.0, 2.0]
    assert after(positive).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("arm, operand", [
    ("flags - 1", torch.tensor([True, False])),
    ("1 - flags", torch.tensor([True, False])),
    ("flags.masked_fill(flags, 0)", torch.tensor([3, 0])),
    ("flags.clamp(min=0)", torch.tensor([1 + 1j, -2 + 0j])),
    ("flags.sign()", torch.tensor([1 + 1j, -2 + 0j])),
    ("flags.maximum(flags)", torch.tensor([1 + 1j, -2 + 0j])),
])
def test_an_arm_that_raises_for_its_dtype_runs_only_when_taken(tmp_path, arm, operand):
    """Code written for one dtype and called with another only on the path that cannot fail."""
    body = f"""
def shift(x, flags):
    if x.sum() > 0:
        y = {arm}
    else:
        y = flags + 1
    return y
"""

    def positive():
        return torch.ones(1), operand.clone()

    def negative():
        return -torch.ones(1), operand.clone()

    _declined_or_same(tmp_path, body, "shift", [negative, positive])


def test_the_branch_not_taken_does_not_warn(tmp_path):
    """A spectrum scaled, or its real part scaled on the other path."""
    body = """
def magnitude(x, spec):
    if x.sum() > 0:
        y = spec.float() * 2
    else:
        y = spec * 2
    return y
"""
    text, result = _fix(body, dynamic=True)
    caught = []
    for source in ([text, result.text] if result.applied else [text, text]):
        fn = load_module(tmp_path, source).magnitude
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            value = fn(-torch.ones(1), torch.tensor([3 + 4j, 0j]))
        caught.append((value.tolist(), [str(w.message) for w in seen]))
    assert caught[0] == ([6 + 8j, 0j], [])
    assert caught[1] == caught[0]


def test_a_flag_used_as_the_condition_and_updated_in_place_later(tmp_path):
    """A decoding step: `finished` picks the output and is then updated in place."""
    body = """
def step(x, finished):
    if finished:
        y = x * 2
    else:
        y = x * 3
    finished |= x.sum() > 100
    return y
"""

    def done():
        return _grad(torch.ones(3)), torch.tensor(True)

    def running():
        return _grad(torch.ones(3)), torch.tensor(False)

    _declined_or_same(tmp_path, body, "step", [running, done])


def test_a_negated_flag_updated_in_place_later_keeps_the_gradients_compiled(tmp_path):
    body = """
def step(x, flag):
    if ~flag:
        y = x * 2
    else:
        y = x * 3
    flag.logical_not_()
    return y
"""

    def on():
        return _grad(torch.ones(3)), torch.tensor(True)

    def off():
        return _grad(torch.ones(3)), torch.tensor(False)

    _declined_or_same(tmp_path, body, "step", [on, off])


# --- attacks that held: rewritten and the same program, or declined ------------------------------


@pytest.mark.parametrize("site", ["if steps.sum() > 0:", "if steps[0] > 0:"])
def test_a_condition_read_from_a_tensor_updated_in_place_later_keeps_the_gradients(tmp_path, site):
    """The condition is a new tensor, and today's partitioner saves it rather than computing it
    again from its source, but nothing promises that (it did compute `~flag` again): a condition
    that reads a tensor written in place after the site is declined, and the program kept."""
    body = f"""
def step(x, steps):
    {site}
        y = x * 2
    else:
        y = x * 3
    steps.neg_()
    return y
"""
    text, result = _fix(body, dynamic=True)
    assert any("`steps.neg_()` updates a tensor in place" in d.reason and "autograd saves what they read" in d.reason
               for d in result.declined), [d.reason for d in result.declined]

    def positive():
        return _grad(torch.ones(3)), torch.tensor([1.0, 2.0])

    def negative():
        return _grad(torch.ones(3)), torch.tensor([-1.0, -2.0])

    _declined_or_same(tmp_path, body, "step", [positive, negative])


def test_integer_arms_that_overflow_select_the_same_wrapped_values(tmp_path):
    """int8 arithmetic wraps in both arms; the select neither raises nor promotes."""
    body = """
def scale(x, codes):
    if x.sum() > 0:
        y = codes * 100
    else:
        y = codes + 1
    return y
"""
    text, result = _fix(body, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]

    def positive():
        return torch.ones(1), torch.tensor([3, -2, 127], dtype=torch.int8)

    def negative():
        return -torch.ones(1), torch.tensor([3, -2, 127], dtype=torch.int8)

    _declined_or_same(tmp_path, body, "scale", [positive, negative])
