"""Red team, third round: a record made in an earlier graph of the region, then a removed break.

A deferred print whose arguments the op ``graphmend::deferred`` cannot carry (``x.dtype``) is a
record the boundary replays after the compiled call. When a later ``if`` on a tensor is fixed
(GM101), its graph break no longer separates the graph that made the record from the code after
the site; if that code fails (while Dynamo traces it, or when the graph runs), the record must
not be lost, nor come out after output the original made later. Each program is fixed with
GM1/GM2 at the default threshold and run compiled (backend ``eager``), original and fixed: the
printed text (in order), the exception type and the module's counter must be the same.
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

HEAD = '''import torch
import torch.nn as nn


class Inner(nn.Module):
    def forward(self, x):
{inner}

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.idx = torch.tensor([7])
        self.inner = Inner()

    def forward(self, x):
{outer}'''

SITE = "        y = x * 1\n        if x.sum():\n            y = y * 2\n"  # x.sum(), y * 2: nothing the rules see may fail
RECORD = '        print("dtype", x.dtype)  # a torch.dtype: the op cannot carry it, a record\n'


def _program(outer: str, inner: str = "        return x\n") -> str:
    return HEAD.format(outer=outer, inner=inner)


PROGRAMS = {
    # the record, a break that stays, the site, a failure while tracing after it
    "earlier graph, trace fault": _program(RECORD + "        torch._dynamo.graph_break()\n" + SITE
                                           + "        z = x.view(3, 3)\n        return y + z\n"),
    # the same with a failure when the graph runs (an index out of range held in a tensor)
    "earlier graph, run-time fault": _program(RECORD + "        torch._dynamo.graph_break()\n        self.calls += 1\n"
                                              + SITE + "        return y[:, self.idx.long()]\n"),
    # the record in the caller, the site in the submodule, the failure in the caller after it
    "caller's record, trace fault": _program(RECORD + "        y = self.inner(x)\n        z = x.view(3, 3)\n"
                                             "        return y + z\n", inner=SITE + "        return y\n"),
    # no failure: output made in the graph after the site must come after the record
    "order": _program(RECORD + SITE + '        print("y", y.sum())\n        return y\n'),
    "order, caller's record": _program(RECORD + '        y = self.inner(x)\n        print("y", y.sum())\n        return y\n',
                                       inner=SITE + "        return y\n"),
}
# Programs whose record is made: the prints deferred first (GM2), then the site fixed (GM1).
RECORDED = {"order", "order, caller's record"}


def _observe(module, values):
    out = io.StringIO()
    error = None
    with contextlib.redirect_stdout(out):
        try:
            module(torch.tensor([values]))
        except Exception as exc:  # noqa: BLE001 - compared with the original's
            error = type(exc)
    return out.getvalue(), error, module.calls


def _fix(text: str, order: str):
    if order == "together":
        return fix_program(text, codes=("GM1", "GM2"), threshold=Safety.SAFE)
    first = fix_program(text, codes=("GM2",), threshold=Safety.SAFE)
    second = fix_program(first.text, codes=("GM1",), threshold=Safety.SAFE)
    return first, second


@pytest.mark.parametrize("order", ["together", "prints first"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_record_of_an_earlier_graph_survives_a_removed_break(tmp_path, name, order):
    text = PROGRAMS[name]
    fixed = _fix(text, order)
    if order == "prints first" and name in RECORDED:
        first, second = fixed
        assert first.text.count("_graphmend_deferred(print") == 2  # the record and the print made in the graph
        assert [f.rule for f in second.applied] == ["GM101"]
    result = fixed if order == "together" else fixed[1]
    values = [0.5, -1.0, 2.0, 0.25]
    reset_dynamo()
    before = _observe(torch.compile(load_module(tmp_path, text).M(), backend="eager"), values)
    reset_dynamo()
    after = _observe(torch.compile(load_module(tmp_path, result.text).M(), backend="eager"), values)
    assert before[0].startswith("dtype torch.float32\n")
    assert after == before, result.text
