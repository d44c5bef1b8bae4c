"""Deferred output made inside the graph (graphmend::deferred): it survives a later failure of
the same graph, in the program's order, as the original printed before it raised."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _side_effect_support import GraphCounter, fix_program, graph_breaks, load_module, reset_dynamo  # noqa: E402

GATHER = '''import torch


class Gather(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        print("gathering", ids.shape, ids)
        return self.emb(ids)
'''

# The rewritten form of a forward with every kind of deferred call, a value the op cannot carry
# (a class object) and a Logger method before a later print: of the logger logging.getLogger
# returns (the op names it), or of one made directly (the op cannot name it: a record).
MIXED = '''import logging
import warnings

import torch

log = {logger}


class Mixed(torch.nn.Module):
    def __init__(self, late_log):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.late_log = late_log

    def forward(self, ids):
        {print}("start", ids.shape, [ids.sum(), 2.5, None], {{"k": (True, "v")}}, sep="|", end="!\\n")
        {warn}("careful", FutureWarning)
        {root}("root %s", ids.max())
        if self.late_log:
            {log}("ids %s", ids)
            {print}("after the log", ids)
        y = self.emb(ids)
        {print}("end", y.shape)
        return y
'''


def _mixed_text(fixed: bool, logger: str = 'logging.getLogger("gm_ingraph")') -> str:
    calls = {"print": "print", "warn": "warnings.warn", "root": "logging.warning", "log": "log.warning", "logger": logger}
    if fixed:
        calls = {"print": '_graphmend_deferred(print, "call", 16, "forward")',
                 "warn": '_graphmend_deferred(warnings.warn, "warn", 17, "forward")',
                 "root": '_graphmend_deferred(logging.warning, "root-log", 18, "forward")',
                 "log": '_graphmend_deferred(log.warning, "log", 20, "forward")', "logger": logger}
    text = MIXED.format(**calls)
    if fixed:  # the runtime inline, as `graphmend fix` writes it for a script outside a package
        runtime = fix_program(GATHER).text
        text += runtime[runtime.index("\n\n# graphmend runtime"):]
    return text


class _Stream(logging.Handler):
    """A handler writing to the current sys.stdout, so prints and records share one stream."""

    def emit(self, record):
        sys.stdout.write(f"LOG {record.levelname} {record.getMessage()} @{record.lineno} {record.funcName}\n")


def _observe(call, inputs):
    out, shown, outcomes = io.StringIO(), [], []
    handler = _Stream()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for ids in inputs:
                try:
                    outcomes.append(("ok", call(torch.tensor(ids)).detach().clone()))
                except Exception as error:  # noqa: BLE001 - the exception is what is compared
                    outcomes.append((type(error).__name__, str(error)))
        shown = [(w.category.__name__, str(w.message), w.lineno) for w in caught]
    finally:
        root.removeHandler(handler)
    return outcomes, out.getvalue(), shown


def _same(expected, got):
    assert [o[0] for o in got[0]] == [o[0] for o in expected[0]]
    for (kind, a), (_, b) in zip(expected[0], got[0]):
        if kind == "ok":
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        else:
            assert a == b
    assert got[1] == expected[1]  # stdout: prints and log records, in order
    assert got[2] == expected[2]  # warnings: category, message, line


CALLS = ([1, 2], [1, 20], [3, 4])  # the second one fails in the embedding (index out of range)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_print_before_a_failing_embedding_comes_out_before_the_exception(tmp_path, backend):
    result = fix_program(GATHER)
    assert "_graphmend_deferred(print" in result.text
    original, fixed = load_module(tmp_path, GATHER), load_module(tmp_path, result.text)
    torch.manual_seed(0)
    model = original.Gather()
    expected = _observe(model, CALLS)
    assert expected[1].count("gathering") == 3 and expected[0][1][0] == "IndexError"
    rewritten = fixed.Gather()
    rewritten.load_state_dict(model.state_dict())
    _same(expected, _observe(rewritten, CALLS))  # eager: the rewrite is print itself
    reset_dynamo()
    counter = GraphCounter() if backend == "eager" else backend
    before = graph_breaks()
    _same(expected, _observe(torch.compile(rewritten, backend=counter), CALLS))
    assert graph_breaks() == before  # and the print is in the graph: no break
    if backend == "eager":
        assert counter.graphs == 1


LOGGERS = {"none": 'logging.getLogger("gm_ingraph")', "named": 'logging.getLogger("gm_ingraph")',
           "unnamed": 'logging.Logger("gm_direct"); log.parent = logging.getLogger()'}  # its records reach the root


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("late_log", sorted(LOGGERS))
def test_every_kind_in_program_order_on_calls_that_pass_and_fail(tmp_path, backend, late_log):
    logger = LOGGERS[late_log]
    original, fixed = load_module(tmp_path, _mixed_text(False, logger)), load_module(tmp_path, _mixed_text(True, logger))
    torch.manual_seed(0)
    model = original.Mixed(late_log != "none")
    rewritten = fixed.Mixed(late_log != "none")
    rewritten.load_state_dict(model.state_dict())
    expected = _observe(model, CALLS)
    _same(expected, _observe(rewritten, CALLS))
    reset_dynamo()
    before = graph_breaks()
    got = _observe(torch.compile(rewritten, backend=backend), CALLS)
    assert graph_breaks() == before
    if late_log != "unnamed":
        # everything before the failing embedding is in the graph, made when the graph runs (the
        # method of a logger that logging.getLogger returns too)
        _same(expected, got)
        return
    # A method of a logger the op cannot name is a record replayed by the boundary, and so is every
    # call after it in the region (the order is kept); on the failing call those records are lost,
    # as they were before the in-graph op: what came before them still comes out before the exception.
    assert [o[0] for o in got[0]] == [o[0] for o in expected[0]]
    lines, want = got[1].splitlines(), expected[1].splitlines()
    # per call: start, the root record, the Logger record, "after the log" (and "end" if it passed)
    assert len(want) == 5 + 4 + 5 and want[7].startswith("LOG WARNING ids") and want[8].startswith("after the log")
    assert lines == want[:5] + want[5:7] + want[9:]  # the failing call loses its last two, no more
    assert got[2] == expected[2]


def test_one_op_for_every_runtime_copy(tmp_path):
    load_module(tmp_path, fix_program(GATHER).text)
    op = torch.ops.graphmend.deferred.default
    load_module(tmp_path, fix_program(GATHER).text)  # a second copy looks the op up
    assert torch.ops.graphmend.deferred.default is op
    assert sys.modules["_graphmend_runtime"].op is op


VALUES = '''import torch


class Values(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        {print}(self.scale, x.shape[0], x.shape, x)
        x.mul_(2)
        return x.sum()
'''


@pytest.mark.parametrize("dynamic", [False, True])
def test_values_are_shown_as_at_the_call(tmp_path, dynamic):
    """A Parameter prints as one, a size that is symbolic under dynamic shapes with its value, and
    a tensor changed in place after the call as it was at the call."""
    fixed_text = VALUES.format(print='_graphmend_deferred(print, "call", 10, "forward")')
    runtime = fix_program(GATHER).text
    fixed_text += runtime[runtime.index("\n\n# graphmend runtime"):]
    original, fixed = load_module(tmp_path, VALUES.format(print="print")), load_module(tmp_path, fixed_text)
    inputs = ([1.0, 2.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0])
    expected = _observe(original.Values(), inputs)
    assert "Parameter containing" in expected[1] and "tensor([4., 5., 6., 7.])" in expected[1]
    reset_dynamo()
    before = graph_breaks()
    _same(expected, _observe(torch.compile(fixed.Values(), backend="aot_eager", dynamic=dynamic), inputs))
    assert graph_breaks() == before
