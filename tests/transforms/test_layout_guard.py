"""The operands of GM101/GM402's layout guard, and its helper against torch's real tensors.

Each operand is read by the guard before the site, on both paths: it must be a name certainly
bound there (never a name the site itself binds first), and never an import, function, class
or builtin; an attribute chain is checked at the object that may be a tensor (``h.dtype`` ->
``h``, ``x.clamp(...)`` -> ``x``, ``self.w.T`` -> ``self.w``).
"""

from __future__ import annotations

import warnings

import libcst as cst
import pytest
import torch

from graphmend.transforms import _analysis as A
from graphmend.transforms import _layout_guard as G
from graphmend.transforms.base import RuleContext
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

MODULE = cst.parse_module("import torch\nimport math\nimport a.b\nfrom torch import nn\nfrom tables import W\n\n\n"
                          "def helper(x):\n    return x\n\n\ndef make(input):\n    return input\n\n\nSCALE = 2\n")


def _operands(expr: str, local=frozenset({"x", "self", "gate", "late"}), bound=lambda n: n != "late"):
    return G.operands([cst.parse_statement(expr)], set(local), bound, G.Scope(MODULE, A.torch_names_of(MODULE)))


@pytest.mark.parametrize("expr,want", [
    ("y = x * 2", ["x"]),  # `y` is assigned by the site: not read
    ("y = x.clamp(max=gate.max())", ["x", "gate"]),  # a method's receiver
    ("y = torch.finfo(x.dtype).max - math.sqrt(2)", ["x"]),  # torch, a module only called, metadata
    ("y = math.pi * x + a.b.W.T", ["math.pi", "x", "a.b.W"]),  # a module's attribute may be a tensor
    ("y = a.b.f(x) + nn.functional.relu(x)", ["x"]),  # modules (torch's too) only called
    ("y = W * 2", ["W"]),  # bound by `from tables import W`: may be a tensor table
    ("y = input * 2 + len(x)", ["input", "x"]),  # a builtin's name the file rebinds (make's parameter)
    ("y = abs(x) + max", ["x"]),  # builtins nothing rebinds
    ("y = self.w.T * self.scale.shape[0]", ["self.w", "self.scale"]),
    ("y = late + x", ["x"]),  # not certainly bound before the site
    ("y = xs[0] * SCALE", ["xs", "SCALE"]),  # free names that are not imports, defs or builtins
    ("y = helper(len(x))", ["x"]),
    ("y = torch.where(x > 0, x, -x) if gate else x", ["x", "gate"]),
])
def test_operands(expr, want):
    assert _operands(expr) == want


def _strided(*values):
    namespace: dict = {}
    exec(G.helper_code("torch"), {"torch": torch}, namespace)
    return namespace[G.HELPER](*values)


def test_the_helper_on_real_tensors():
    dense = torch.ones(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        others = [dense.to_sparse(), dense.to_sparse_csr(), dense.to_mkldnn(), dense.to("meta"),
                  torch.quantize_per_tensor(dense, 0.1, 0, torch.quint8),
                  torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])]
    assert _strided(dense, 3, None, [dense, (dense,)], {"a": dense}, torch.nn.Parameter(dense))
    for other in others:
        assert not _strided(dense, other), other
        assert not _strided([dense, {"k": other}]), other


def test_two_sites_in_one_file_insert_each_helper_once():
    # one site needs the truth, select and layout helpers, the other two of them: each appears once
    text = ("import torch\n\n\ndef f(x, gate):\n    if gate > 0:\n        y = x * 2\n    else:\n        y = x + 1\n"
            "    return y\n\n\ndef g(x):\n    if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x + 1\n    return y\n")
    result = fix_text("m.py", text, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [5, 13]})
    assert len(result.applied) == 2, [d.reason for d in result.declined]
    for helper in ("_graphmend_strided", "_graphmend_select", "_graphmend_truth"):
        assert result.text.count(f"def {helper}(") == 1, result.text
    compile(result.text, "m.py", "exec")
