"""A differential fuzzer for the rewrite rules (hypothesis, real Dynamo on CPU).

It generates small modules that combine what makes rewrites unsound — aliases of the caller's
tensor (``x``, ``x.float()``, views), in-place updates (``add_``, ``inplace=True``, an in-place
submodule, ``out=``), a nested module and a helper that print, loops, a tensor check that raises,
Python-side state — fixes them with every rule at the default (``safe``) threshold, and checks
the rewritten program against the original, eager and compiled (backends ``eager`` and
``aot_eager``): returned values, the input's gradient, the caller's tensor after the call, module
state, stdout, and the exception type and message.

Replayed tensors are detached copies, so a deferred print shows no ``grad_fn``: streams are
compared with autograd annotations removed (the values printed must match exactly). A compiled
program that fails while Dynamo traces it (``out=`` with a tensor that requires grad) or while the
backend compiles it is compared whole too, the caller's tensor and the streams included: a removed
graph break had made the part before it (an in-place write, a print, ``self.calls += 1``) a graph
of its own that ran before the failure, and the rules decline a site where that part may write
and the rest may fail (``_merged.lost_effects`` for GM101/GM402, the deferral rules' own
judgement for a print). ``test_a_trace_time_error_after_a_removed_break_keeps_the_effects_before_it``
is that case, written out. A failure while the graph runs (a lowered check) is compared the same way.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

HEADER = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def report(t):
    print("report", t.sum())


class Sub(nn.Module):
    def forward(self, x):
        print("sub", x.sum())
        if x.mean() > 0:
            x = x.clamp(max=2.0)
        return x


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU(inplace=True)
        self.sub = Sub()
        self.calls = 0
        self.w = nn.Parameter(torch.full((1, 4), 0.5))

    def forward(self, x):
'''

# torch.gt(x, 0.5) has four elements: the original raises "ambiguous", and so must the rewrite.
CONDS = ["x.sum() > 0", "(x > 0.5).any()", "x.mean() < 0", "(y > 1).all()", "torch.gt(x, 0.5)"]
# x * self.w and x.detach(): arms that differ for autograd (requires_grad, None vs zero grads);
# (x * 1e30) * x: an arm that overflows (NaN gradients through a select).
EXPRS = ["x * 2", "x.clamp(max=1.0)", "x - 1", "x.abs()", "x.float()", "x", "torch.tanh(x)", "y + x",
         "x * self.w", "(x * 1e30) * x", "x.detach()"]
INITS = ["x", "x.float()", "x.view(-1).view_as(x)", "x * 1", "x.contiguous()"]
SIMPLE = [
    "y.add_(1)", "x.mul_(2)", "F.relu(y, inplace=True)", "self.act(y)", "torch.add(y, 1, out=y)",
    "print('p', x.sum(), y.sum())", "report(y)", "x = self.sub(x)", "self.calls += 1",
]
BRANCHES = [
    "if {c}:\n    x = {e}",
    "if {c}:\n    y = {e}\nelse:\n    y = x",
    "y = x if {c} else {e}",
    "if (x > 100).any():\n    raise ValueError('too big')",
]


@st.composite
def programs(draw):
    lines = [f"y = {draw(st.sampled_from(INITS))}"]
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            stmt = draw(st.sampled_from(BRANCHES)).format(c=draw(st.sampled_from(CONDS)), e=draw(st.sampled_from(EXPRS)))
        else:
            stmt = draw(st.sampled_from(SIMPLE))
        if draw(st.integers(0, 5)) == 0:
            stmt = "for _ in range(2):\n" + "\n".join("    " + line for line in stmt.splitlines())
        lines.append(stmt)
    lines.append("return x, y")
    body = "".join("        " + line + "\n" for stmt in lines for line in stmt.splitlines())
    return HEADER + body


TRACE_ERROR = torch._dynamo.exc.TorchRuntimeError  # an error met while Dynamo traces, before the graph runs
INPUTS = [[[0.5, -1.0, 2.0, 0.25]], [[-0.5, -1.0, -2.0, -0.25]], [[200.0, 1.0, 3.0, 0.75]], [[-3.0e9, 1.0, 0.5, -2.0]]]
_GRAD_NOISE = re.compile(r", grad_fn=<\w+>|, requires_grad=True")


def _observe(module, values):
    leaf = torch.tensor(values, requires_grad=True)
    given_x = leaf * 1  # the caller's tensor (written in place by some programs)
    out = io.StringIO()
    seen: dict = {}
    try:
        with contextlib.redirect_stdout(out):
            result = module(given_x)
            loss = sum(r.sum() for r in result if r.requires_grad)
            if isinstance(loss, torch.Tensor):
                loss.backward()
        seen["result"] = [r.detach().clone() for r in result]
        seen["kind"] = [(type(r).__name__, r.requires_grad, r is given_x) for r in result]
        seen["grad"] = None if leaf.grad is None else leaf.grad.clone()
        seen["w_grad"] = None if module.w.grad is None else module.w.grad.clone()
    except Exception as error:  # noqa: BLE001 - compared with the original's
        seen["error"] = (type(error), str(error).splitlines()[0] if str(error) else "")
    seen["input_after"] = given_x.detach().clone()
    seen["calls"] = module.calls
    seen["stdout"] = _GRAD_NOISE.sub("", out.getvalue())
    return seen


def _same(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), (what, a.get("error"), b.get("error"))
    if "error" in a:
        # the same type, or Dynamo's subclass of it (TorchRuntimeError for a RuntimeError met while tracing)
        assert issubclass(b["error"][0], a["error"][0]), (what, a["error"], b["error"])
    else:
        for x, y in zip(a["result"], b["result"]):
            torch.testing.assert_close(y, x, equal_nan=True, msg=lambda m: f"{what}: value {m}")
        assert a["kind"] == b["kind"], (what, a["kind"], b["kind"])
        for key in ("grad", "w_grad"):
            if a[key] is None or b[key] is None:
                assert a[key] is b[key] is None, (what, key)
            else:
                torch.testing.assert_close(b[key], a[key], equal_nan=True, msg=lambda m: f"{what}: {key} {m}")
    torch.testing.assert_close(b["input_after"], a["input_after"], equal_nan=True, msg=lambda m: f"{what}: input {m}")
    assert a["calls"] == b["calls"], what
    assert a["stdout"] == b["stdout"], what


@settings(max_examples=30, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=programs(), values=st.sampled_from(INPUTS), backend=st.sampled_from(["eager", "aot_eager"]))
def test_rewritten_program_behaves_as_the_original(tmp_path, text, values, backend):
    result = fix_program(text, codes=("GM1", "GM2", "GM3", "GM4"), threshold=Safety.SAFE)
    original = load_module(tmp_path, text)
    rewritten = load_module(tmp_path, result.text)
    reset_dynamo()
    before = _observe(original.M(), values)
    after = _observe(rewritten.M(), values)
    _same(before, after, f"eager\n{result.text}")
    if result.text == text:
        return  # nothing rewritten: the compiled runs would compare a program with itself
    compiled_before = _observe(torch.compile(original.M(), backend=backend), values)
    compiled_after = _observe(torch.compile(rewritten.M(), backend=backend), values)
    if "error" not in before:
        _same(before, compiled_before, f"original, compiled\n{text}")  # the harness itself is sound
    _same(compiled_before, compiled_after, f"compiled ({backend})\n{result.text}")


TRACE_TIME_ERROR = HEADER + """\
        y = x * 1
        x.mul_(2)
        print('p', x.detach().sum(), y.detach().sum())  # printed without grad_fn: made in the graph
        self.calls += 1
        if x.sum() < 0:
            y = y * 2
        torch.add(y, 1, out=y)
        return x, y
"""


def test_a_trace_time_error_after_a_removed_break_keeps_the_effects_before_it(tmp_path):
    """The ``if`` is a graph break that commits the in-place write, the print and ``self.calls``
    before the rest is traced; the rest fails while Dynamo traces it (``out=`` with a tensor that
    requires grad). GM101 declines the site, naming the write and the call that may fail, and the
    print (given tensors, so lost with a failed trace) is left as written: the compiled program
    behaves as the original, the streams included."""
    result = fix_program(TRACE_TIME_ERROR, codes=("GM1", "GM2", "GM3", "GM4"), threshold=Safety.SAFE)
    declined = [d for d in result.declined if d.rule == "GM101" and "x.mul_(2)" in d.reason]
    assert len(declined) == 1 and "torch.add(y, 1, out=y)" in declined[0].reason
    reset_dynamo()
    before = _observe(torch.compile(load_module(tmp_path, TRACE_TIME_ERROR).M(), backend="eager"), INPUTS[1])
    reset_dynamo()
    after = _observe(torch.compile(load_module(tmp_path, result.text).M(), backend="eager"), INPUTS[1])
    assert before["error"][0] is after["error"][0] is TRACE_ERROR
    assert before["stdout"].startswith("p tensor(-7.5000)") and before["calls"] == 1
    torch.testing.assert_close(after["input_after"], before["input_after"])
    assert after["stdout"] == before["stdout"] and after["calls"] == before["calls"]
