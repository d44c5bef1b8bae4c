"""GM101/GM402: a removed graph break must not lose what the original committed at it.

The original runs the graph before the ``if`` on a tensor, commits its effects (an in-place
write to the caller's tensor, ``self.calls += 1``), then traces the rest. The select merges the
two graphs: when the rest fails (while Dynamo traces it, or when it runs), nothing of the merged
graph is committed. Each program is fixed with every rule at the default threshold and run
compiled (backend ``eager``), original and fixed, on the same input: the exception, the caller's
tensor afterwards and the module's counter must be the same. The declines name the effect and
the code that may fail; programs where nothing may fail after the site, or nothing is written
before it, keep their fix (``_merged.lost_effects`` is no broader than that).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

HEADER = '''import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.idx = torch.tensor([7])
        self.inner = Inner()

    def forward(self, x):
'''

INNER = '''

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = 0

    def forward(self, x):
{body}'''


def _program(body: str, inner: str = "        return x\n") -> str:
    return HEADER + body + INNER.format(body=inner)


def _observe(module, values):
    given = torch.tensor(values, requires_grad=True) * 1  # the caller's tensor
    seen = {}
    try:
        module(given)
        seen["error"] = None
    except Exception as error:  # noqa: BLE001 - compared with the original's
        seen["error"] = type(error)
    seen["input"] = given.detach().clone()
    seen["calls"] = (module.calls, module.inner.seen)
    return seen


def _compare(tmp_path, text: str, values=(-0.5, -1.0, -2.0, -0.25)):
    result = fix_program(text, codes=("GM1", "GM2", "GM3", "GM4"), threshold=Safety.SAFE)
    reset_dynamo()
    before = _observe(torch.compile(load_module(tmp_path, text).M(), backend="eager"), [list(values)])
    reset_dynamo()
    after = _observe(torch.compile(load_module(tmp_path, result.text).M(), backend="eager"), [list(values)])
    assert before["error"] is after["error"]
    torch.testing.assert_close(after["input"], before["input"])
    assert after["calls"] == before["calls"]
    return result, before


def _gm101(result):
    applied = [f for f in result.applied if f.rule in ("GM101", "GM402")]
    declined = [d for d in result.declined if d.rule in ("GM101", "GM402") and "commits what runs before it" in d.reason]
    return applied, declined


TRACE_FAULT = "        torch.add(y, 1, out=y)  # out= with a tensor that requires grad: fails while Dynamo traces it\n"


@pytest.mark.parametrize("effect, shown", [("x.mul_(2)", "`x.mul_(2)`"), ("self.calls += 1", "`self.calls += 1`")])
def test_an_effect_before_the_site_and_a_trace_fault_after_it_decline(tmp_path, effect, shown):
    text = _program(f"        y = x * 1\n        {effect}\n        if x.sum() > 0:\n            y = y * 2\n" + TRACE_FAULT
                    + "        return x, y\n")
    result, before = _compare(tmp_path, text)
    assert before["error"] is torch._dynamo.exc.TorchRuntimeError
    applied, declined = _gm101(result)
    assert not applied and len(declined) == 1
    assert shown in declined[0].reason and "torch.add(y, 1, out=y)" in declined[0].reason


def test_a_conditional_expression_declines_the_same(tmp_path):
    text = _program("        y = x * 1\n        x.mul_(2)\n        y = y * 2 if x.sum() > 0 else y\n"
                    "        z = x.view(3, 3)  # four elements: fails while Dynamo traces it\n        return x, y + z\n")
    result, before = _compare(tmp_path, text)
    assert before["error"] is torch._dynamo.exc.TorchRuntimeError
    applied, declined = _gm101(result)
    assert not applied and [d.rule for d in declined] == ["GM402"]


def test_a_caller_that_fails_after_the_submodule_declines(tmp_path):
    """The site is in Inner; the caller wrote the caller's tensor before calling it and fails after."""
    text = _program("        x.mul_(2)\n        y = self.inner(x)\n" + TRACE_FAULT + "        return x, y\n",
                    inner="        y = x * 1\n        if x.sum() > 0:\n            y = y * 2\n        return y\n")
    result, before = _compare(tmp_path, text)
    assert before["error"] is torch._dynamo.exc.TorchRuntimeError
    applied, declined = _gm101(result)
    assert not applied and len(declined) == 1 and "x.mul_(2)" in declined[0].reason


def test_a_failure_when_the_graph_runs_declines(tmp_path):
    """An index held in a tensor (out of range): the graph raises when it runs, and Dynamo applies
    none of its Python side effects."""
    text = _program("        y = x * 1\n        self.calls += 1\n        if x.sum() > 0:\n            y = y * 2\n"
                    "        y = y[:, self.idx.long()]\n        return x, y\n")
    result, before = _compare(tmp_path, text)
    assert before["error"] is not None
    applied, declined = _gm101(result)
    assert not applied and len(declined) == 1 and "y[:, self.idx.long()]" in declined[0].reason


def test_a_try_that_catches_the_trace_failure_declines(tmp_path):
    """Without an effect before: the original met the trace failure in a frame of its own, inside
    the caller's ``try``."""
    text = _program("        try:\n            y = self.inner(x)\n        except RuntimeError:\n            y = x\n"
                    "        return x, y\n",
                    inner="        y = x * 1\n        if x.sum() > 0:\n            y = y * 2\n" + TRACE_FAULT
                    + "        return y\n")
    result = fix_program(text, codes=("GM1",), threshold=Safety.SAFE)
    assert not result.applied
    assert any("`try`" in d.reason and "may fail while Dynamo traces it" in d.reason for d in result.declined)


@pytest.mark.parametrize("body", [
    # nothing may fail after the site
    "        y = x * 1\n        x.mul_(2)\n        self.calls += 1\n        if x.sum() > 0:\n            y = y * 2\n"
    "        return x, y\n",
    # nothing is written before it
    "        y = x * 1\n        if x.sum() > 0:\n            y = y * 2\n" + TRACE_FAULT + "        return x, y\n",
    # a write to a tensor made here
    "        y = x * 1\n        y.mul_(2)\n        if x.sum() > 0:\n            y = y * 2\n" + TRACE_FAULT
    + "        return x, y\n",
])
def test_the_fix_stays_where_nothing_is_lost(tmp_path, body):
    result, _ = _compare(tmp_path, _program(body))
    applied, declined = _gm101(result)
    assert [f.rule for f in applied] == ["GM101"] and not declined


UNREAD_WRITER = '''import torch
import torch.nn as nn


def make_act():
    return nn.ReLU(inplace=True)


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.act = make_act()  # a submodule whose class this file does not show
        self.inner = nn.Identity()
        self.inner.seen = 0

    def forward(self, x):
        self.act(x)
        y = x * 1
        if x.sum() > 0:
            y = y * 2
''' + TRACE_FAULT + '''        return x, y
'''


@pytest.mark.xfail(strict=True, reason="a write made before the site by code the rules do not read (a submodule built "
                   "by a function, another file's module) is not counted: the merged graph's trace failure loses the "
                   "in-place ReLU on the caller's tensor that the original ran before the removed break")
def test_a_write_by_code_not_read_before_the_site_is_kept(tmp_path):
    _compare(tmp_path, UNREAD_WRITER)
