"""A GM101 arm that reads a property whose getter prints or draws random numbers.

The original reads ``self.scaled`` once per call (in the branch taken). A rewrite would read it
in the layout guard and in both values of the torch.where form: three getter calls, so three
prints instead of one, and three random draws instead of one (a different value, and the
generator left elsewhere for the code after the call). A property read is code: GM101 declines,
and the program (unchanged) prints and draws as before, eager and compiled.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools

import pytest
import torch

from graphmend.transforms.base import RuleContext
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

TEMPLATE = '''import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("base", torch.ones(3))

    @property
    def scaled(self):
        {body}

    @torch.no_grad()
    def forward(self, x):
        if x.sum() > 0:
            y = self.scaled * 2
        else:
            y = self.scaled - 1
        return y
'''

_counter = itertools.count()


def _pair(tmp_path, body):
    text = TEMPLATE.format(body=body)
    result = fix_text("m.py", text, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [16]})
    assert result.applied == ()
    assert "reads property `scaled`, whose getter runs on every read" in result.declined[0].reason
    models = []
    for source in (text, result.text):
        path = tmp_path / f"gm_property_{next(_counter)}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        models.append(module.M())
    return models


def _compiled(models, backend):
    if backend is None:
        return models
    torch._dynamo.reset()
    return [torch.compile(m, backend=backend) for m in models]


@pytest.mark.parametrize("backend", [None, "eager"])
def test_a_printing_property_prints_once_per_call(tmp_path, backend):
    outputs = []
    for model in _compiled(_pair(tmp_path, 'print("scaled read"); return self.base * 2'), backend):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            value = model(torch.ones(3))
        outputs.append((value.tolist(), out.getvalue()))
    assert outputs[0] == ([4.0, 4.0, 4.0], "scaled read\n")
    assert outputs[1] == outputs[0]


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_a_random_property_draws_once_per_call(tmp_path, backend):
    outcomes = []
    for model in _compiled(_pair(tmp_path, "return self.base * torch.rand(3)"), backend):
        torch.manual_seed(0)
        value = model(torch.ones(3))
        outcomes.append((value.tolist(), torch.rand(1).item()))
    assert outcomes[1] == outcomes[0]


def test_a_property_in_the_condition_is_declined():
    """The guard reads the condition's operands too: a property there runs twice."""
    text = TEMPLATE.format(body="return self.base * 2").replace("if x.sum() > 0:", "if self.scaled.sum() > 0:") \
        .replace("self.scaled * 2", "x * 2").replace("self.scaled - 1", "x - 1")
    result = fix_text("m.py", text, RuleContext(verified=True), [DataDependentBranch()], {"GM101": [16]})
    assert result.applied == ()
    assert "reads property `scaled`, whose getter runs on every read" in result.declined[0].reason
