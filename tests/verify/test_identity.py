"""``verify`` tells the caller's own tensor from a fresh one of equal values, without ``--grad``,
and compares sparse inputs and outputs (by layout and dense values).

``graphmend.verify.observe.output_identity`` records, for every output tensor, whether it is one
of the call's inputs or the module's parameters/buffers (the same object), a view of one (shared
storage), or an earlier output; the two arms must agree. Each target below is rewritten by hand
the way a forced (``--unsafe-fixes``) predication would, and verify runs without gradients. An
output's strides are compared too (where it is not contiguous).
"""

from __future__ import annotations

import pytest
import torch

from tests.verify.repo_files import targets_config, verify_forced
from graphmend.verify.observe import output_identity

pytestmark = pytest.mark.xdist_group("verify_identity")


def test_output_identity_names_inputs_parameters_views_and_repeats():
    m = torch.nn.Linear(2, 2)
    x, y = torch.ones(3), torch.zeros(2)
    facts = output_identity((x, x.view(3), x.clone(), m.weight, {"k": y}, x), ((x,), {"y": y}), m)
    assert facts == {
        "out[0].alias": "is args[0]",
        "out[1].alias": "shares storage with args[0]",
        "out[3].alias": "is state:weight",
        "out[4]['k'].alias": "is kwargs['y']",
        "out[5].alias": "is args[0]",
    }
    fresh = torch.ones(2)
    assert output_identity((fresh, fresh), ((), {})) == {"out[1].alias": "is out[0]"}
    # a sparse tensor has no storage to share: identity only, never an error
    s = torch.eye(2).to_sparse()
    assert output_identity((s, s * 1), ((s,), {})) == {"out[0].alias": "is args[0]"}
    assert output_identity(torch.empty(0), ((torch.empty(0),), {})) == {}  # no elements, no storage


MODEL = '''\
import torch


class Outputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x):
        keep = x if x.sum() > 0 else x * 2
        fresh = x.clone() if x.sum() > 0 else x * 2
        view = x.view(-1) if x.sum() > 0 else x.reshape(-1) * 2
        buffer = self.scale if x.sum() > 0 else self.scale * 2
        return keep, fresh, view, buffer


class Heads(torch.nn.Module):
    def forward(self, x):
        scores = x.outer(x)
        if x.sum() > 0:
            merged = scores.t()
        else:
            merged = scores * 2
        return merged


class Sparse(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x - 1
        return y
'''

WRONG = {
    # out[0]: the caller's tensor becomes a fresh one
    "keep = x if x.sum() > 0 else x * 2": "keep = torch.where(x.sum() > 0, x, x * 2)",
    # out[1]: a fresh copy becomes the caller's tensor
    "fresh = x.clone() if x.sum() > 0 else x * 2": "fresh = x if x.sum() > 0 else x * 2",
    # out[2]: a view becomes a copy
    "view = x.view(-1) if x.sum() > 0 else x.reshape(-1) * 2": "view = torch.where(x.sum() > 0, x.view(-1), x.reshape(-1) * 2)",
    # out[3]: the module's buffer becomes a fresh tensor
    "buffer = self.scale if x.sum() > 0 else self.scale * 2": "buffer = torch.where(x.sum() > 0, self.scale, self.scale * 2)",
    # the contiguous branch's result takes the transposed arm's strides (torch.where lays its
    # result out like its first tensor argument); the scores are symmetric, the values equal
    "        if x.sum() > 0:\n            merged = scores.t()\n        else:\n            merged = scores * 2\n":
        "        merged = torch.where(x.sum() > 0, scores.t(), scores * 2)\n",
    # a sparse argument: `x - 1` has no sparse kernel and now runs on the path not taken
    "        if x.sum() > 0:\n            y = x * 2\n        else:\n            y = x - 1\n":
        "        y = torch.where(x.sum() > 0, x * 2, x - 1)\n",
}

TARGETS = '''\
import torch

from pkg import model


def outputs(dtype=torch.float32, device="cpu"):
    return model.Outputs(), (torch.ones(3, dtype=dtype),)


def heads(dtype=torch.float32, device="cpu"):
    return model.Heads(), (-torch.arange(1.0, 4.0, dtype=dtype),)


def sparse(dtype=torch.float32, device="cpu"):
    return model.Sparse(), (torch.eye(3, dtype=dtype).to_sparse(),)
'''

CONFIG = targets_config(("outputs", "heads", "sparse"), "aot_eager")


def test_a_forced_rewrite_that_changes_identity_is_caught_without_grad(make_repo):
    report = verify_forced(make_repo, MODEL, TARGETS, CONFIG, WRONG, grad=False)
    by = {t.name: t for t in report.targets}
    found = [f"{m.kind}/{m.check}: {m.detail}" for m in by["outputs"].mismatches]
    for mode in ("eager", "compiled"):
        line = next(d for d in found if d.startswith(f"output/{mode}: out[0].alias"))
        assert "out[0].alias: '<absent>' != 'is args[0]'" in line, found
        assert "out[1].alias: 'is args[0]' != '<absent>'" in line, found
        assert "out[2].alias: '<absent>' != 'shares storage with args[0]'" in line, found
        assert line.endswith("; also out[3].alias"), found  # is state:scale in the original
    assert not by["outputs"].ok
    # equal values everywhere: identity is the only difference
    assert all("max abs error" not in d for d in found), found
    # equal values, another layout: a caller's `.view(-1)` works on one and raises on the other
    heads = [f"{m.kind}/{m.check}: {m.detail}" for m in by["heads"].mismatches]
    assert not by["heads"].ok
    for mode in ("eager", "compiled"):
        assert f"output/{mode}: out.strides: '(1, 3)' != '<absent>'" in heads, heads
    assert all("max abs error" not in d for d in heads), heads
    sparse = " | ".join(f"{m.kind}/{m.check}: {m.detail}" for m in by["sparse"].mismatches)
    assert not by["sparse"].ok and "exception/eager" in sparse and "exception/compiled" in sparse, sparse
    assert "add(sparse, dense) is not supported" in sparse, sparse


def test_sparse_tensors_are_compared_by_layout_and_dense_values():
    from graphmend.verify.observe import _same_tensor, flatten, portable

    for make in (torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr):
        x = make(torch.eye(2))
        assert _same_tensor(x, x.clone()) and not _same_tensor(x, make(torch.eye(2) * 2))
        assert not _same_tensor(x, torch.eye(2))  # equal values, another layout
        assert torch.equal(portable(x), torch.eye(2))
        assert dict(flatten(x))["out.layout"] == str(x.layout)
    assert "out.layout" not in dict(flatten(torch.eye(2)))


def test_an_output_that_is_not_contiguous_carries_its_strides():
    from graphmend.verify.observe import flatten

    x = torch.arange(6.0).reshape(2, 3)
    assert dict(flatten(x.t()))["out.strides"] == "(1, 3)"
    assert dict(flatten(x[:, :1].expand(2, 3)))["out.strides"] == "(3, 0)"
    assert "out.strides" not in dict(flatten(x))  # contiguous: nothing to compare
    assert "out.strides" not in dict(flatten(x[:1]))  # a size-1 dimension's stride does not matter
    assert "args[0].strides" not in dict(flatten(x.t(), "args"))  # only a call's outputs carry facts
