"""Adversarial GM101/GM402 modules mixing sparse tensors, gradients, views, in-place writes after
the ``if``, nested modules and containers: each is either declined or the same program.

"The same program" is checked eagerly and compiled (backends ``eager`` and ``aot_eager``) on inputs
that take each path: outputs (values, layout, type, requires_grad, identity with the arguments),
gradients of every leaf, the arguments after the call (in-place writes), the module's state after
the call, and the exception (type and message) where the original raises.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest
import torch

from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.engine import fix_text
from tests.transforms._side_effect_support import load_module, reset_dynamo
from tests.transforms.test_predication_soundness import HEADER, RULES, _observe, _same

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")

POS = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
NEG = -POS

# name -> (source, entry ("f" or a Module class), argument makers, expected: "fixed"/"declined")
CASES: dict = {
    "sparse values with gradients": ("""
    def f(x, gate):
        if gate.sum() > 0:
            y = x * 2
        else:
            y = x * 3
        return y
    """, "f", lambda s: (s.to_sparse().requires_grad_(True), s.sum(0)), "fixed"),
    "sparse csr argument, dense result": ("""
    def f(x, gate):
        return (x * 2 if gate.sum() > 0 else x.neg()).to_dense()
    """, "f", lambda s: (s.to_sparse_csr(), s.sum(0)), "fixed"),
    "sparse one-element condition, dense values": ("""
    def f(x, gate):
        y = (x * 2 if torch.isinf(gate) else x * 3) + 1
        return y
    """, "f", lambda s: (s, (s[:1, :1] * float("inf") if s.sum() > 0 else s[:1, :1]).to_sparse()), "fixed"),
    "a view of the argument is returned": ("""
    def f(x):
        if x.sum() > 0:
            y = x.view(-1)
        else:
            y = x.reshape(-1) * 2
        return y
    """, "f", lambda s: (s.clone(),), "declined"),
    "in-place after the if on the caller's tensor": ("""
    def f(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x
        y.add_(1)
        return y.sum()
    """, "f", lambda s: (s.clone(),), "declined"),
    "in-place after the if on a tensor made here": ("""
    def f(x):
        h = x * 1.5
        if h.sum() > 0:
            h = h.clamp(max=1.0)
        h.add_(1)
        return h
    """, "f", lambda s: (s.clone(),), "fixed"),
    "nested module returns its argument on one path": ("""
    class Inner(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                x = x.clamp(max=1.0)
            return x


    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            y = self.inner(x)
            y.mul_(2)
            return y
    """, "Outer", lambda s: (s.clone(),), "declined"),
    "nested module over a fresh tensor": ("""
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2, 2)

        def forward(self, x):
            h = self.proj(x)
            if h.sum() > 0:
                h = h.clamp(max=0.5)
            return h


    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) + x
    """, "Outer", lambda s: (s.clone().requires_grad_(True),), "fixed"),
    "the argument's container keeps the selected value": ("""
    def f(xs):
        if xs[0].sum() > 0:
            y = xs[0] * 2
        else:
            y = xs[1]
        xs.append(y)
        return len(xs)
    """, "f", lambda s: ([s.clone(), s.clone() + 1],), "declined"),
    "a dict keeps a conditional expression of the argument": ("""
    def f(x):
        out = {"h": x if x.sum() > 0 else x * 2}
        return out["h"]
    """, "f", lambda s: (s.clone(),), "declined"),
    "a parameter is returned on one path": ("""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2, 2))

        def forward(self, x):
            p = self.w if x.sum() > 0 else self.w * 2
            return p
    """, "M", lambda s: (s.clone(),), "declined"),
    "a buffer selected then written in place": ("""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.zeros(2, 2))

        def forward(self, x):
            if x.sum() > 0:
                b = self.buf
            else:
                b = self.buf + 1
            b.add_(x)
            return b.sum()
    """, "M", lambda s: (s.clone(),), "declined"),
    "a no-op conversion of the argument is returned": ("""
    def f(x):
        if x.sum() > 0:
            y = x.float()
        else:
            y = x * 2
        return y
    """, "f", lambda s: (s.clone(),), "declined"),
    "fresh values and gradients in a tuple": ("""
    def f(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x * 3
        return y, x.sum()
    """, "f", lambda s: (s.clone().requires_grad_(True),), "fixed"),
    # Conservative: the analysis does not follow a value around the loop's back edge, so `h`
    # (fresh on every iteration here) counts as possibly the caller's
    "a loop over a fresh tensor": ("""
    @torch.no_grad()
    def f(x):
        h = x + 0
        for _ in range(3):
            if h.abs().sum() > 1:
                h = h * 0.5
        return h
    """, "f", lambda s: (s.clone(),), "declined"),
    "a loop that reads a fresh tensor it does not rebind": ("""
    @torch.no_grad()
    def f(x):
        h = x + 0
        out = []
        for k in range(3):
            if h.abs().sum() > k:
                y = h * 0.5
            else:
                y = h * 2
            out.append(y)
        return torch.stack(out)
    """, "f", lambda s: (s.clone(),), "fixed"),
    "a caller's dict gets the selected value": ("""
    def f(x, cache):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x
        cache.update(last=y)
        return y.sum()
    """, "f", lambda s: (s.clone(), {}), "declined"),
}


def _fix(body: str):
    text = HEADER + textwrap.dedent(body).lstrip("\n")
    found = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ") or " if " in line]
    return text, fix_text("m.py", text, RuleContext(threshold=Safety.UNSAFE, verified=True), RULES,
                          {"GM101": found, "GM402": found})


def _state(fn) -> dict:
    owner = getattr(fn, "_orig_mod", fn)
    if not isinstance(owner, torch.nn.Module):
        return {}
    return {k: v.detach().clone() for k, v in owner.state_dict().items()}


def _dense(value):
    if isinstance(value, torch.Tensor):
        return value.detach().to_dense() if value.layout != torch.strided else value.detach()
    if isinstance(value, (list, tuple)):
        return [_dense(v) for v in value]
    return value


def _call(module, entry: str, mode: str, args):
    torch.manual_seed(0)
    target = getattr(module, entry)
    fn = target() if isinstance(target, type) else target
    if mode != "plain":
        reset_dynamo()
        fn = torch.compile(fn, backend=mode)
    seen = _observe(fn, args)
    seen["args after"] = _dense(list(args))
    seen["state after"] = _state(fn)
    return seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_module_is_declined_or_the_same_program(case, tmp_path):
    body, entry, make, expected = CASES[case]
    text, result = _fix(body)
    if expected == "declined":
        assert not result.applied and result.text == text, (case, result.text)
        assert result.declined, case
        return
    assert result.applied, (case, [d.reason for d in result.declined])
    before, after = load_module(tmp_path, text), load_module(tmp_path, result.text)
    for sign in (POS, NEG):
        for mode in ("plain", "eager", "aot_eager"):  # uncompiled, then compiled with each backend
            a = _call(before, entry, mode, make(sign.clone()))
            b = _call(after, entry, mode, make(sign.clone()))
            what = f"{case}/{mode}/{'+' if sign is POS else '-'}"
            for key in ("args after", "state after"):
                torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=lambda m: f"{what}: {key} {m}")
            for seen in (a, b):
                seen.pop("args after"), seen.pop("state after")
                if "values" in seen:
                    seen["layouts"] = [getattr(v, "layout", None) for v in seen["values"]]
                    seen["values"] = [_dense(v) for v in seen["values"]]
                    seen["grads"] = [_dense(g) for g in seen["grads"]]
            assert a.get("layouts") == b.get("layouts"), what
            _same(a, b, what)
