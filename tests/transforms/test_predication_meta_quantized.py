"""GM101's select on tensors the `if` decided differently: meta and quantized tensors.

The helper ``_graphmend_select`` falls back to the `if` for sparse layouts, but a meta tensor
(shape inference, ``init_empty_weights``-style model construction) or a quantized one is
strided, so it reaches ``torch.where``. The original's ``if x.max() > 2`` raises on a meta tensor
("Tensor.item() cannot be called on meta tensors"); the rewrite returns a meta value instead.
On a quantized tensor the original fails in its own arithmetic, the rewrite in ``where`` with
another message. Eager mode, the fix at the default safety: the same outcome is expected.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402

PROGRAM = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        if x.max() > 2:
            x = x.clamp(max=2.0)
        return x + 1
'''

_names = itertools.count()


def _load(path, text):
    path.write_text(text)
    name = f"select_layouts_prog_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _outcome(module, x):
    try:
        out = module.M()(x)
    except Exception as exc:  # noqa: BLE001 - the exception is what is compared
        return ["raise", type(exc).__name__, str(exc)]
    return ["value", out.device.type, list(out.shape)]


def _meta():
    return torch.tensor([1.0, 3.0], device="meta")


def _quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.tensor([1.0, 3.0]), 0.1, 0, torch.quint8)


@pytest.mark.parametrize("make", [_meta, _quantized], ids=["meta", "quantized"])
def test_select_fails_where_the_if_failed(tmp_path, make):
    result = fix_text("prog.py", PROGRAM, RuleContext(file="prog.py", device="cpu"))
    assert [f.rule for f in result.applied] == ["GM101"]  # the rewrite under test is applied today
    original = _load(tmp_path / "original.py", PROGRAM)
    fixed = _load(tmp_path / "fixed.py", result.text)
    want = _outcome(original, make())
    assert want[0] == "raise"
    assert _outcome(fixed, make()) == want
