"""GM101 and a returned view taken by indexing a call's result (``x.unbind(0)[0]``).

``x.narrow(0, 0, 1)`` kept on one path and returned is declined (the caller would get a new
tensor where it got a view of its own), but the same view reached through a subscript of a
view call's result (``unbind``, ``chunk``, ``split``: ``_effects.alias_roots`` takes the roots of
a subscript and stops at the call) is rewritten at the default safety. The caller that updates
the result in place then no longer writes its own tensor.

Each program is fixed at the default safety; the test calls original and fixed the same way,
adds 10 to the returned tensor in place and compares the result and the caller's tensor.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

torch = pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402

GM101 = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        v = {view}
        if x.sum() > 0:
            y = v
        else:
            y = v * 2
        return y
'''

VIEWS = ["x.unbind(0)[0]", "x.chunk(2)[0]", "x.split(1)[0].squeeze(0)", "torch.split(x, 1)[0].squeeze(0)"]

_names = itertools.count()


def _load(path, text):
    path.write_text(text)
    name = f"alias_views_prog_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _caller(module):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = module.M()(x)
    out.add_(10)
    return out.tolist(), x.tolist()


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_through_a_subscripted_call_keeps_the_callers_tensor(tmp_path, view):
    text = GM101.format(view=view)
    result = fix_text("prog.py", text, RuleContext(file="prog.py", device="cpu"))
    want = _caller(_load(tmp_path / "original.py", text))
    assert want[1][0] == [11.0, 12.0]  # the original hands back a view: the caller's x is written
    assert _caller(_load(tmp_path / "fixed.py", result.text)) == want, [f.rule for f in result.applied]
