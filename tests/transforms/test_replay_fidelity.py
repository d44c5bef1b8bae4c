"""The boundary where it really runs, and replay fidelity (torch 2.13, CPU, real Dynamo).

A torch container subclass defined in the file (it inherits ``forward``) is the compiled entry:
it must be a boundary itself. Replayed arguments keep their types: a Parameter prints as one, a
namedtuple or dataclass holding a tensor shows the tensor as it was at the call. A Logger
subclass that overrides ``warning()`` still gets the call.
"""

from __future__ import annotations

import contextlib
import io
import logging

import pytest

torch = pytest.importorskip("torch")

from tests.transforms._side_effect_support import fix_program, graph_breaks, load_module, reset_dynamo  # noqa: E402

PROGRAM = '''import dataclasses
import logging
from collections import namedtuple

import torch

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Box:
    value: torch.Tensor
    tag: str = "box"


class LoudLogger(logging.Logger):
    def warning(self, msg, *args, **kwargs):
        super().warning("LOUD " + msg, *args, **kwargs)


logging.setLoggerClass(LoudLogger)
logger = logging.getLogger("graphmend-test-loud")
logging.setLoggerClass(logging.Logger)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        y = x * self.scale
        print("block", y.sum())
        return y + 1


class Stack(torch.nn.Sequential):
    pass


class Snap(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        y = x + 1
        pair = Pair(y, 2)
        box = Box(y)
        print(pair, box.value, self.w)
        logger.warning("sum %s", y.sum())
        y.mul_(10)
        return y
'''


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    result = fix_program(PROGRAM, codes=("GM2",))
    assert sorted(f.rule for f in result.applied) == ["GM201", "GM201", "GM202"], [d.reason for d in result.declined]
    return load_module(tmp_path_factory.mktemp("fidelity"), result.text)


def _run(fn, x):
    # no_grad: a replayed tensor is a detached copy, so it prints without its grad_fn
    out = io.StringIO()
    with contextlib.redirect_stdout(out), torch.no_grad():
        y = fn(x)
    return y, out.getvalue()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_container_subclass_is_a_boundary_where_it_is_the_compiled_entry(mod, backend):
    reset_dynamo()
    model = mod.Stack(mod.Block(), mod.Block())
    compiled = torch.compile(model, backend=backend)
    x = torch.ones(2)
    eager_y, eager_text = _run(model, x)
    for _ in range(2):  # each call shows its own output, in order, right after it
        y, text = _run(compiled, x)
        assert text == eager_text == "block tensor(2.)\nblock tensor(4.)\n"
        torch.testing.assert_close(y, eager_y)
    assert graph_breaks() == 0
    assert mod._graphmend_region().head is mod._graphmend_region().root


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_replay_keeps_types_values_at_the_call_and_the_loggers_own_method(mod, backend):
    reset_dynamo()
    handler = _Capture()
    mod.logger.addHandler(handler)
    try:
        eager_y, eager_text = _run(mod.Snap(), torch.ones(2))
        eager_logs = list(handler.messages)
        handler.messages.clear()
        y, text = _run(torch.compile(mod.Snap(), backend=backend), torch.ones(2))
    finally:
        mod.logger.removeHandler(handler)
    assert "Parameter containing" in eager_text and "Pair(a=tensor([2., 2.])" in eager_text
    assert text == eager_text
    assert handler.messages == eager_logs == ["LOUD sum tensor(4.)"]
    torch.testing.assert_close(y, eager_y)
    assert graph_breaks() == 0


ORDER_PROGRAM = '''import sys

import torch


def report(y):
    print("helper", y.sum())


class Chatty(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        print("first", y.sum())
        report(y)
        print("last", y.sum())
        return y


class Writer(torch.nn.Module):
    def forward(self, x):
        print("printed", x.sum())
        sys.stdout.write("written\\\\n")
        return x * 2
'''


def test_output_order_is_kept_with_helpers_and_stream_writers(tmp_path):
    # issue 18: print, a module-level helper that prints, print again. The helper is called from
    # Chatty's forward, so its print is deferred to the same boundary and all three are replayed
    # in program order. Writer's direct sys.stdout.write stays immediate, so deferring its print
    # would reorder them: at the default safety it is not deferred, and under compile the order holds.
    from graphmend.model import Safety

    result = fix_program(ORDER_PROGRAM, codes=("GM2",), threshold=Safety.SAFE)
    assert [(f.rule, f.line) for f in result.applied] == [("GM201", 7), ("GM201", 13), ("GM201", 15)]
    unsafe = fix_program(ORDER_PROGRAM, codes=("GM2",))
    notes = " ".join(f.notes for f in unsafe.applied)
    assert "report(...)" not in notes and "sys.stdout.write(...)" in notes
    mod = load_module(tmp_path, result.text)
    reset_dynamo()
    for cls in (mod.Chatty, mod.Writer):
        eager_y, eager_text = _run(cls(), torch.ones(2))
        y, text = _run(torch.compile(cls(), backend="eager"), torch.ones(2))
        assert text == eager_text
