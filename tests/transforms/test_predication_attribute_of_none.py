"""A GM101 arm that reads an attribute of an attribute the module sets to ``None``.

``self.memory`` is ``None`` until a caller fills it, and the original reads ``self.memory.keys``
only on the branch that needs it. A rewrite would read it on every call (the layout
guard's operand and the torch.where form's other value), so a call that took the other branch
would raise ``AttributeError`` where the original returned: GM101 declines, naming the read.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from graphmend.transforms.base import RuleContext
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

SOURCE = '''import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.memory = None

    @torch.no_grad()
    def forward(self, x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = self.memory.keys * 2
        return y
'''


def _model(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.M()


def _outcome(fn, x):
    try:
        return ("value", fn(x).tolist())
    except Exception as exc:  # what the program does, raise included
        return ("raised", type(exc).__name__)


@pytest.mark.parametrize("backend", [None, "eager", "aot_eager"])
def test_an_attribute_of_a_none_attribute_is_read_only_where_its_branch_runs(tmp_path, backend):
    result = fix_text("m.py", SOURCE, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [12]})
    assert result.applied == ()
    assert "reads `self.memory.keys`" in result.declined[0].reason
    original, fixed = _model(tmp_path, "gm_none_orig", SOURCE), _model(tmp_path, "gm_none_fixed", result.text)
    if backend is not None:
        torch._dynamo.reset()
        original, fixed = torch.compile(original, backend=backend), torch.compile(fixed, backend=backend)
    x = torch.ones(3)
    assert _outcome(original, x) == ("value", [2.0, 2.0, 2.0])
    assert _outcome(fixed, x) == _outcome(original, x)
