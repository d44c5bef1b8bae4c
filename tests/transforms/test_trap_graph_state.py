"""A lowered check (GM301 raise, GM303 assert) fails the whole compiled graph: what that graph
did before it is lost (Dynamo applies state writes and the runtime's records when the graph
returns). These programs have such a write in another module class of the file — a submodule
called before the check, a parent that prints before calling the checking child — or in a torch
module that updates buffers (batch norm in train mode). Each is run original vs fixed at the
default safety, eager and compiled (real Dynamo, eager and aot_eager backends, CPU), on inputs
that pass and fail the check: outputs, exceptions, printed text and module state must be equal.
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

PARENT_PRINTS_CHILD_RAISES = '''import torch


class Child(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.child = Child()

    def forward(self, x):
        print("parent", x.sum())
        return self.child(x) * 2
'''

PARENT_PRINTS_CHILD_ASSERTS = PARENT_PRINTS_CHILD_RAISES.replace(
    '        if (x < 0).any():\n            raise ValueError("negative input")\n',
    '        assert x.max().item() <= 2, "too big"\n')

SIBLING_COUNTS = '''import torch


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x + self.calls


class Check(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = Counter()
        self.check = Check()

    def forward(self, x):
        y = self.counter(x)
        return self.check(y) * 2
'''

BATCH_NORM = '''import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        y = self.bn(x)
        if (x > 100).any():
            raise ValueError("input too large")
        return y * 2
'''

GOOD, BAD = torch.ones(4, 3), torch.full((4, 3), -500.0)


def _calls(module, backend, inputs):
    reset_dynamo()
    torch.manual_seed(0)
    model = module.M()
    fn = torch.compile(model, backend=backend) if backend else model
    seen = []
    for x in inputs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                value = ("returned", fn(x.clone()).tolist())
            except Exception as exc:  # noqa: BLE001 - the outcome is compared
                value = ("raised", type(exc).__name__, str(exc))
        seen.append((value, out.getvalue()))
    state = {k: v.tolist() for k, v in model.state_dict().items()}
    counter = getattr(model, "counter", None)
    return seen, state, getattr(counter, "calls", None)


@pytest.mark.parametrize("program,inputs,backend", [
    (PARENT_PRINTS_CHILD_RAISES, [GOOD, -GOOD, GOOD], "eager"),
    (PARENT_PRINTS_CHILD_ASSERTS, [GOOD, GOOD * 5, GOOD], "eager"),
    (SIBLING_COUNTS, [GOOD, BAD, GOOD], "eager"),
    # (under the eager backend the graph's ops update the buffers as they run; aot_eager applies them at the end)
    (BATCH_NORM, [GOOD + torch.arange(4.0)[:, None], -BAD, GOOD * 3 + torch.arange(4.0)[:, None]], "aot_eager"),
], ids=["parent-prints-child-raises", "parent-prints-child-asserts", "sibling-counts", "batch-norm"])
def test_a_lowered_check_keeps_what_the_graph_did_before_it(tmp_path, program, inputs, backend):
    result = fix_program(program, threshold=Safety.SAFE)
    original, fixed = load_module(tmp_path, program), load_module(tmp_path, result.text)
    for backend in (None, backend):
        before, after = _calls(original, backend, inputs), _calls(fixed, backend, inputs)
        assert after == before, (backend, [(f.rule, f.line) for f in result.applied])
        assert any(v[0] == "raised" for v, _ in before[0]), "an input fails the check"


def test_a_check_after_an_already_deferred_print_is_declined(tmp_path):
    """`graphmend fix` run again after the file gained a check: the print deferred by the first
    run is a record the failing graph would lose."""
    first = fix_program(PARENT_PRINTS_CHILD_RAISES.replace(
        '        if (x < 0).any():\n            raise ValueError("negative input")\n', ""), codes=("GM2",),
        threshold=Safety.SAFE)
    assert [f.rule for f in first.applied] == ["GM201"]
    program = first.text.replace("    def forward(self, x):\n        return x + 1",
                                 '    def forward(self, x):\n        assert x.max().item() <= 2, "too big"\n'
                                 "        return x + 1", 1)
    assert program != first.text
    second = fix_program(program, codes=("GM3",), threshold=Safety.SAFE)
    assert not second.applied
    # (declined for the record or, first, for the inline runtime's own `nn.Module.forward` use, which the
    # reachability walk cannot follow: either way the check is not lowered)
    assert any(d.rule == "GM303" and ("_graphmend_deferred(print" in d.reason or "Module.forward" in d.reason)
               for d in second.declined), second.declined
