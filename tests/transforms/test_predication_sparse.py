"""Sparse (non-strided) tensors at a rewritten GM101/GM402 site: the same program, or declined.

``torch.where`` has no sparse kernel, ``x - 1`` has none for sparse COO, and ``if t:`` on a sparse
one-element tensor is decided by ``bool()`` (a CSR one raises). The rewrite selects only under
``_graphmend_strided(...)`` (static under Dynamo) and keeps the original ``if`` as its ``elif``
for every tensor that is not an ordinary strided one; the helpers it calls still choose exactly as
the original did where a condition or a value is not strided. Every case runs
the original and the rewritten module eagerly and compiled (backends ``eager`` and ``aot_eager``)
on COO and CSR inputs, and compares values, layouts, identity, gradients and exceptions.
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

LAYOUTS = {"coo": torch.Tensor.to_sparse, "csr": torch.Tensor.to_sparse_csr}
MODES = ("eager", "compiled-eager", "compiled-aot_eager")

CASES = {
    # GM101, assignment form: the values are sparse, the condition dense (the old documented limit)
    "assign": ("""
    def f(x, gate):
        if gate.sum() > 0:
            y = x * 2
        else:
            y = x * 3
        return y
    """, lambda s, lay: (lay(s), s.sum(0))),
    # GM101, return form, the condition computed from the sparse tensor itself
    "return": ("""
    def f(x, gate):
        if x.sum() > 0:
            return x * 2
        return x.neg()
    """, lambda s, lay: (lay(s), None)),
    # GM101 with a condition that is itself sparse: `_graphmend_truth` decides it by bool(),
    # as the `if` did (COO: its value; CSR: the `if`'s NotImplementedError; several elements:
    # "ambiguous")
    "sparse condition": ("""
    def f(x, gate):
        if torch.isinf(gate):
            y = x * 2
        else:
            y = x * 3
        return y
    """, lambda s, lay: (s, lay(s[:1, :1] * float("inf")) if s.sum() > 0 else lay(s[:1]))),
    # GM402 inside an expression
    "conditional expression": ("""
    def f(x, gate):
        return (x * 3 if x.sum() > 0 else x.abs()).to_dense() + 1
    """, lambda s, lay: (lay(s), None)),
}

SIGNS = {"positive": torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "negative": torch.tensor([[-1.0, 0.0], [0.0, -2.0]])}


def _fix(body: str):
    """The rewrite as Dynamo's report places it, at every safety level (the label is not what is
    tested here: the program is)."""
    text = HEADER + textwrap.dedent(body).lstrip("\n")
    found = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ") or " if " in line]
    return text, fix_text("m.py", text, RuleContext(threshold=Safety.UNSAFE, verified=True), RULES,
                          {"GM101": found, "GM402": found})


def _modes(module):
    for mode in MODES:
        if mode == "eager":
            yield mode, module.f
        else:
            reset_dynamo()
            yield mode, torch.compile(module.f, backend=mode.split("-")[1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_sparse_inputs_give_what_the_original_gave(case, tmp_path):
    body, make = CASES[case]
    text, result = _fix(body)
    assert result.applied, [d.reason for d in result.declined]
    before, after = load_module(tmp_path, text), load_module(tmp_path, result.text)
    seen_errors = set()
    for layout, lay in LAYOUTS.items():
        for sign, dense in SIGNS.items():
            args = make(dense, lay)
            for (mode, old), (_, new) in zip(_modes(before), _modes(after)):
                what = f"{case}/{layout}/{sign}/{mode}"
                a, b = _observe(old, args), _observe(new, args)
                _same(a, b, what)
                if "error" in a:
                    seen_errors.add(a["error"][1])
                else:
                    assert [getattr(v, "layout", None) for v in a["values"]] == [getattr(v, "layout", None) for v in b["values"]], what
    if case == "sparse condition":  # the `if`'s own errors were met, and matched
        assert any("ambiguous" in e for e in seen_errors) and any("_local_scalar_dense" in e for e in seen_errors), seen_errors


def test_sparse_gradients_are_the_originals():
    body, _ = CASES["assign"]
    text, result = _fix(body)
    assert result.applied
    import types

    before, after = types.SimpleNamespace(), types.SimpleNamespace()
    exec(compile(text, "before.py", "exec"), before.__dict__)
    exec(compile(result.text, "after.py", "exec"), after.__dict__)
    for sign, dense in SIGNS.items():
        grads = []
        for module in (before, after):
            x = dense.to_sparse().requires_grad_(True)
            torch.sparse.sum(module.f(x, dense.sum(0))).backward()
            grads.append(x.grad.to_dense())
        assert torch.equal(grads[0], grads[1]), sign


def test_an_operation_without_a_sparse_kernel_in_the_value_not_taken():
    # `x - 1` has no sparse COO kernel: where the original took `x * 2`, the select must not compute it
    text, result = _fix("""
    def f(x, gate):
        if gate.sum() > 0:
            y = x * 2
        else:
            y = x - 1
        return y
    """)
    assert result.applied
    ns_before: dict = {}
    ns_after: dict = {}
    exec(compile(text, "before.py", "exec"), ns_before)
    exec(compile(result.text, "after.py", "exec"), ns_after)
    x = SIGNS["positive"].to_sparse()
    assert torch.equal(ns_after["f"](x, torch.ones(1)).to_dense(), ns_before["f"](x, torch.ones(1)).to_dense())
