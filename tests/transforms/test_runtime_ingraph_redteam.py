"""Attacks on the deferred output made inside the graph (graphmend::deferred): original vs fixed
and compiled, on the printed text. Each confirmed difference is a strict expected failure."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

GRAD = '''import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        with torch.no_grad():
            frozen = x * self.w
        y = x * self.w
        print("y", frozen, y)
        return y.sum()
'''


def _printed(model, calls=2):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for _ in range(calls):
            model(torch.tensor([1.0, 2.0])).backward()
    return out.getvalue()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_print_of_a_tensor_that_requires_grad_keeps_its_grad_fn(tmp_path, backend):
    """The op is given detached copies, whose text has no ``grad_fn=``: such a call is made as the
    original made it, at a graph break, and prints what the original compiled program printed
    (under aot_eager the grad_fn is the compiled graph's, in both)."""
    result = fix_program(GRAD)
    assert "_graphmend_deferred(print" in result.text
    expected = _printed(load_module(tmp_path, GRAD).M())
    assert expected.count("grad_fn=<MulBackward0>") == 2  # the no_grad value has none
    reset_dynamo()
    compiled = _printed(torch.compile(load_module(tmp_path, GRAD).M(), backend=backend))
    assert compiled == expected or backend != "eager"
    reset_dynamo()
    got = _printed(torch.compile(load_module(tmp_path, result.text).M(), backend=backend))
    assert got == compiled


def test_print_without_gradients_stays_in_the_graph(tmp_path):
    """Only a tensor that requires grad sends the call back to Python: under no_grad the fixed
    program is one graph and prints what the original printed."""
    result = fix_program(GRAD)
    module = load_module(tmp_path, result.text)
    reset_dynamo()
    counts = torch._dynamo.utils.counters
    counts.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), torch.no_grad():
        torch.compile(module.M(), backend="eager")(torch.tensor([1.0, 2.0]))
    assert out.getvalue() == "y tensor([1., 2.]) tensor([1., 2.])\n"
    assert not counts["graph_break"], dict(counts["graph_break"])


SWITCHED = '''import logging
import warnings

import torch


class M(torch.nn.Module):
    def forward(self, x):
        logging.info("quiet %s", x.sum())
        warnings.warn("w")
        print("p", x.sum(), x.dtype)
        return x + 1
'''


def _switched(model):
    import logging
    import warnings

    records, shown, out = [], [], io.StringIO()

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage(), record.lineno))

    root, handler, level = logging.getLogger(), Keep(), logging.getLogger().level
    root.addHandler(handler)
    try:
        for lvl, rule in ((logging.WARNING, "ignore"), (logging.INFO, "always"),
                          (logging.WARNING, "once"), (logging.INFO, "once")):
            root.setLevel(lvl)
            with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter(rule)
                model(torch.arange(3.0))
            shown.append([(w.category.__name__, str(w.message), w.lineno) for w in caught])
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return out.getvalue(), records, shown


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_level_and_warning_filter_changed_between_calls_are_read_at_each_call(tmp_path, backend):
    """Held: the logger level and the warnings filter set after compiling are the ones each call sees."""
    result = fix_program(SWITCHED)
    assert result.text.count("_graphmend_deferred(") == 3
    expected = _switched(load_module(tmp_path, SWITCHED).M())
    assert len(expected[1]) == 2 and [len(s) for s in expected[2]] == [0, 1, 1, 1]
    reset_dynamo()
    assert _switched(torch.compile(load_module(tmp_path, result.text).M(), backend=backend)) == expected


@contextlib.contextmanager
def _kept_records(name, keep):
    """Each record of logger ``name`` made inside, its message handed to ``keep``."""
    import logging

    class Keep(logging.Handler):
        def emit(self, record):
            keep(record.getMessage())

    logger, handler = logging.getLogger(name), Keep()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


LOGGED = '''import logging
import torch
log = logging.getLogger("grad_fn_logged")
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
    def forward(self, x):
        y = x * self.w
        log.warning("y %s", y)
        return y.sum()
'''


def test_a_logged_tensor_that_requires_grad_keeps_its_grad_fn(tmp_path):
    """A Logger method is a record the boundary replays, and a record is a detached copy too:
    given a tensor that requires grad, the call is made as the original made it."""

    result = fix_program(LOGGED)
    assert "_graphmend_deferred(log.warning" in result.text

    def logged(model):
        seen = []
        with _kept_records("grad_fn_logged", lambda message: seen.append(message)):
            model(torch.tensor([1.0, 2.0])).backward()
        return seen

    expected = logged(load_module(tmp_path, LOGGED).M())
    assert expected == ["y tensor([1., 2.], grad_fn=<MulBackward0>)"]
    reset_dynamo()
    assert logged(torch.compile(load_module(tmp_path, result.text).M(), backend="eager")) == expected


ORDERED = '''import logging
import torch
log = logging.getLogger("grad_fn_ordered")
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
    def forward(self, x):
        log.warning("first")
        y = x * self.w
        print("y", y)
        log.warning("last")
        return y.sum()
'''


def test_a_grad_print_after_a_recorded_call_comes_after_it(tmp_path):
    """A Logger method recorded earlier in the region, then a print made at a graph break: the
    record is replayed first (at the break), then the print, then the rest, as in the original."""

    result = fix_program(ORDERED)
    assert "_graphmend_deferred(print" in result.text and "_graphmend_deferred(log.warning" in result.text

    def events(model):
        seen = []

        class Out(io.StringIO):
            def write(self, text):
                if text.strip():
                    seen.append(("print", text.strip()))
                return len(text)

        with _kept_records("grad_fn_ordered", lambda message: seen.append(("log", message))):
            with contextlib.redirect_stdout(Out()):
                model(torch.tensor([1.0, 2.0])).backward()
        return seen

    expected = events(load_module(tmp_path, ORDERED).M())
    assert expected == [("log", "first"), ("print", "y"), ("print", "tensor([1., 2.], grad_fn=<MulBackward0>)"),
                        ("log", "last")]
    reset_dynamo()
    assert events(torch.compile(load_module(tmp_path, result.text).M(), backend="eager")) == expected
