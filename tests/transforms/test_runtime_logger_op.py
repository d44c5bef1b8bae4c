"""A Logger's method made in the graph by ``graphmend::deferred`` (torch 2.13, CPU, real Dynamo).

The runtime names a logger that ``logging.getLogger`` returns by constants while Dynamo traces the
call (``_graphmend_target``: ``id()`` guards the logger's identity; a constant computed on the real
objects names the logger and its method), and the op calls that logger's method when the graph
runs: no graph break, no record; a Logger subclass's override runs, a disabled level formats
nothing, transformers' ``warning_once`` keeps its once-per-message cache, the record's location is
the call site's. A logger it cannot name (made directly, not by getLogger) falls back to the
record the boundary replays.
"""

from __future__ import annotations

import contextlib
import importlib
import logging

import pytest

torch = pytest.importorskip("torch")

from tests.transforms._side_effect_support import (GraphCounter, captured_logger, fix_program, graph_breaks,  # noqa: E402
                                                   load_module, reset_dynamo)

PROGRAM = '''import logging

import torch


class Loud(logging.Logger):
    def warning(self, msg, *args, **kwargs):
        super().warning("LOUD " + msg, *args, **kwargs)


logging.setLoggerClass(Loud)
loud = logging.getLogger("gm_op.loud")
logging.setLoggerClass(logging.Logger)
logger = logging.getLogger("gm_op.plain")
once = logging.getLogger("gm_op.once")


class M(torch.nn.Module):
    def forward(self, x):
        logger.info("width %d of %s", x.shape[-1], x.shape)
        loud.warning("loud %s", "call")
        once.warning_once("only once")
        return x * 2
'''


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture()
def program(tmp_path):
    importlib.import_module("transformers.utils.logging")  # patches warning_once onto logging.Logger

    logging.Logger.warning_once.cache_clear()
    result = fix_program(PROGRAM, codes=("GM2",))
    assert sorted(f.rule for f in result.applied) == ["GM202"] * 3, [d.reason for d in result.declined]
    handler = Capture()
    try:
        with captured_logger("gm_op", handler):
            yield load_module(tmp_path, PROGRAM), load_module(tmp_path, result.text), handler
    finally:
        logging.Logger.warning_once.cache_clear()


@contextlib.contextmanager
def _flushes(module):
    """The boundary's replays of records (calls of ``_graphmend_flush``) while the block runs."""
    flush, flushed = module._graphmend_flush, []
    module._graphmend_flush = lambda: flushed.append(True) or flush()
    try:
        yield flushed
    finally:
        module._graphmend_flush = flush


def _shown(records):
    return [(r.name, r.levelname, r.getMessage(), r.lineno, r.funcName) for r in records]


def _run(model, calls, handler):
    handler.records.clear()
    logging.Logger.warning_once.cache_clear()
    for x in calls:
        model(x)
    return _shown(handler.records)


CALLS = [torch.ones(2, 3), torch.ones(2, 3), torch.ones(4, 5), torch.ones(3, 7)]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_logger_methods_are_made_in_the_graph_as_the_original_makes_them(program, backend):
    original, fixed, handler = program
    want = _run(original.M(), CALLS, handler)
    assert [r[2] for r in want].count("only once") == 1 and ("gm_op.loud", "WARNING", "LOUD loud call", 8, "warning") in want
    assert ("gm_op.plain", "INFO", "width 3 of torch.Size([2, 3])", 20, "forward") in want
    reset_dynamo()
    counter = GraphCounter()
    compiled = torch.compile(fixed.M(), backend=counter if backend == "eager" else backend)
    with _flushes(fixed) as flushed:
        got = _run(compiled, CALLS, handler)
    assert got == want  # the override's own location, the plain call's line and function
    assert [r.pathname for r in handler.records if r.name == "gm_op.plain"] == [fixed.__file__] * len(CALLS)
    assert graph_breaks() == 0 and flushed == []  # made by the op: nothing recorded for the boundary
    if backend == "eager":
        assert counter.graphs == 2  # the static sizes, then the dynamic ones: no recompile per call


def test_a_disabled_level_formats_nothing_and_a_level_set_later_applies_without_recompiling(program):
    _, fixed, handler = program
    made = []
    plain = logging.getLogger("gm_op.plain")
    plain.makeRecord = lambda *args, **kwargs: made.append(args) or logging.Logger.makeRecord(plain, *args, **kwargs)
    reset_dynamo()
    counter = GraphCounter()
    compiled = torch.compile(fixed.M(), backend=counter)
    try:
        plain.setLevel(logging.WARNING)
        compiled(torch.ones(2, 3))
        assert made == [] and not [r for r in handler.records if r.name == "gm_op.plain"]
        plain.setLevel(logging.DEBUG)
        compiled(torch.ones(2, 3))
        assert [r.getMessage() for r in handler.records if r.name == "gm_op.plain"] == ["width 3 of torch.Size([2, 3])"]
        assert counter.graphs == 1 and graph_breaks() == 0
    finally:
        del plain.makeRecord
        plain.setLevel(logging.NOTSET)


def test_a_logger_bound_anew_recompiles_and_logs_to_the_new_one(program):
    """id() guards the logger: a graph traced for one logger is not reused for another."""
    _, fixed, handler = program
    reset_dynamo()
    counter = GraphCounter()
    compiled = torch.compile(fixed.M(), backend=counter)
    compiled(torch.ones(2, 3))
    fixed.logger = logging.getLogger("gm_op.other")
    try:
        handler.records.clear()
        compiled(torch.ones(2, 3))
        assert [r.name for r in handler.records if "width" in r.getMessage()] == ["gm_op.other"]
        assert counter.graphs == 2 and graph_breaks() == 0
    finally:
        fixed.logger = logging.getLogger("gm_op.plain")


UNNAMED = '''import logging

import torch

direct = logging.Logger("gm_direct")
direct.parent = logging.getLogger("gm_op")


class M(torch.nn.Module):
    def forward(self, x):
        direct.warning("direct %s", x.shape)
        return x * 2
'''


def test_a_logger_getlogger_does_not_return_is_recorded_for_the_boundary(tmp_path, program):
    """The runtime cannot name a logger made directly (it is no logger of logging's manager): its
    call is the record the boundary replays after the graph, with the call's location."""
    _, _, handler = program
    text = fix_program(UNNAMED.replace('logging.Logger("gm_direct")', 'logging.getLogger("gm_direct")'),
                       codes=("GM2",)).text.replace('logging.getLogger("gm_direct")', 'logging.Logger("gm_direct")', 1)
    assert '_graphmend_deferred(direct.warning, "log", 11, "forward")' in text
    fixed = load_module(tmp_path, text)
    reset_dynamo()
    counter = GraphCounter()
    compiled = torch.compile(fixed.M(), backend=counter)
    handler.records.clear()
    with _flushes(fixed) as flushed:
        compiled(torch.ones(2, 3))
    assert [(r.getMessage(), r.lineno, r.funcName) for r in handler.records] == [("direct torch.Size([2, 3])", 11, "forward")]
    assert flushed == [True] and counter.graphs == 1 and graph_breaks() == 0
