"""Tensors a GM101 arm reads that the layout guard must check.

The guard ``_graphmend_strided(...)`` must see every tensor the ``torch.where`` form computes:
a sparse tensor it misses makes the arm not taken run (``W + 1`` has no sparse COO kernel),
so the rewritten program would raise where the original returned. Each program here is
rewritten, and each runs the rewritten file and the original on a sparse COO tensor (eager:
Dynamo does not trace sparse tensors, so the compiled program runs the same statement).
"""

from __future__ import annotations

import importlib.util
import itertools
import warnings

import torch

from graphmend.transforms.base import RuleContext
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

_counter = itertools.count()


def _rewrite(text: str, line: int) -> str:
    result = fix_text("m.py", text, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [line]})
    assert len(result.applied) == 1, [d.reason for d in result.declined]
    return result.text


def _load(tmp_path, text: str):
    path = tmp_path / f"gm_layout_missed_{next(_counter)}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sparse():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()


def _outcome(fn, *args):
    try:
        value = fn(*args)
    except Exception as exc:  # the comparison is of what the program does, raise included
        return ("raised", type(exc).__name__)
    return ("value", value.to_dense().tolist())


IMPORTED = '''import torch
import {tables}


def f(gate):
    if gate.sum() > 0:
        y = {tables}.W * 2
    else:
        y = {tables}.W + 1
    return y
'''


def test_a_sparse_tensor_read_from_an_imported_module_runs_the_original_branch(tmp_path, monkeypatch):
    tables = f"gm_tables_{next(_counter)}"
    (tmp_path / f"{tables}.py").write_text("W = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = IMPORTED.format(tables=tables)
    rewritten = _rewrite(text, 6)
    assert "_graphmend_strided(" in rewritten
    original, fixed = _load(tmp_path, text), _load(tmp_path, rewritten)
    table = importlib.import_module(tables)
    table.W = _sparse()
    gate = torch.ones(3)
    assert _outcome(original.f, gate) == ("value", [[0.0, 4.0], [6.0, 0.0]])
    assert _outcome(fixed.f, gate) == _outcome(original.f, gate)


CLOSURE = '''import torch


def make(input):
    def f(gate):
        if gate.sum() > 0:
            y = input * 2
        else:
            y = input + 1
        return y
    return f
'''


def test_a_sparse_closure_variable_named_like_a_builtin_runs_the_original_branch(tmp_path):
    rewritten = _rewrite(CLOSURE, 6)
    assert "_graphmend_strided(" in rewritten
    original, fixed = _load(tmp_path, CLOSURE), _load(tmp_path, rewritten)
    gate = torch.ones(3)
    want = _outcome(original.make(_sparse()), gate)
    assert want == ("value", [[0.0, 4.0], [6.0, 0.0]])
    assert _outcome(fixed.make(_sparse()), gate) == want


SPARSE_GRAD = '''import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(3, 2, sparse=True)

    def forward(self, gate):
        g = self.emb.weight.grad
        if gate.sum() > 0:
            y = g * 2
        else:
            y = g + 1
        return y
'''


def test_a_sparse_gradient_of_a_strided_parameter_runs_the_original_branch(tmp_path):
    rewritten = _rewrite(SPARSE_GRAD, 12)
    assert "_graphmend_strided(" in rewritten
    outcomes = []
    for text in (SPARSE_GRAD, rewritten):
        torch.manual_seed(0)
        model = _load(tmp_path, text).M()
        model.emb(torch.tensor([0, 2])).sum().backward()
        assert model.emb.weight.layout == torch.strided and model.emb.weight.grad.layout == torch.sparse_coo
        outcomes.append(_outcome(model, torch.ones(3)))
    assert outcomes[0][0] == "value"
    assert outcomes[1] == outcomes[0]


FROM_IMPORTED = '''import torch
from {tables} import W


def f(gate):
    if gate.sum() > 0:
        y = W * 2
    else:
        y = W + 1
    return y
'''


def test_a_sparse_tensor_imported_by_name_runs_the_original_branch(tmp_path, monkeypatch):
    tables = f"gm_tables_{next(_counter)}"
    (tmp_path / f"{tables}.py").write_text(
        "import warnings\nimport torch\n\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n"
        "    W = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = FROM_IMPORTED.format(tables=tables)
    rewritten = _rewrite(text, 6)
    assert "_graphmend_strided(" in rewritten
    original, fixed = _load(tmp_path, text), _load(tmp_path, rewritten)
    gate = torch.ones(3)
    assert _outcome(original.f, gate) == ("value", [[0.0, 4.0], [6.0, 0.0]])
    assert _outcome(fixed.f, gate) == _outcome(original.f, gate)


GRAD_IN_ARM = '''import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(3, 2)

    @torch.no_grad()
    def forward(self, gate):
        if gate.sum() > 0:
            y = self.emb.weight.grad * 2
        else:
            y = self.emb.weight * 0
        return y
'''


def test_a_gradient_read_in_a_branch_is_declined(tmp_path):
    """``.grad`` is None until a backward pass: read in the branch not taken (and by the guard),
    it would raise where the original returned."""
    result = fix_text("m.py", GRAD_IN_ARM, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [12]})
    assert result.applied == ()
    assert "reads `self.emb.weight.grad`; a gradient is None until a backward pass" in result.declined[0].reason
    model = _load(tmp_path, GRAD_IN_ARM).M()
    assert model(-torch.ones(3)).tolist() == [[0.0, 0.0]] * 3  # the original returns: grad is never read
