"""Red-team programs for a Logger's method made in the graph by ``graphmend::deferred``.

Each program runs original and fixed (``fix_program``, as test_runtime_logger_op.py does),
uncompiled and compiled with the eager and aot_eager backends (torch 2.13, CPU, real Dynamo); the
log records (name, message, line, function, the exception they show), printed text and each call's
outcome must be the same.
"""

from __future__ import annotations

import contextlib
import logging

import pytest

torch = pytest.importorskip("torch")

from tests.transforms._side_effect_support import captured_logger, fix_program, load_module, reset_dynamo  # noqa: E402


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen: list[tuple] = []

    def emit(self, record):
        shown = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        self.seen.append(("log", record.name, record.getMessage(), record.lineno, record.funcName, shown))

    def write(self, text):
        if text.strip():
            self.seen.append(("out", text))

    def flush(self):
        pass


@pytest.fixture()
def capture():
    handler = Capture()
    with captured_logger("gm_red", handler):
        yield handler


def _observe(tmp_path, text, backend, handler, between=lambda module: None, calls=2):
    """What ``calls`` calls of the program's model show; ``between`` changes the module's state
    after the first call (the graph is reused: no recompile is asked for)."""
    module = load_module(tmp_path, text)
    reset_dynamo()
    model = module.M()
    if backend != "uncompiled":
        model = torch.compile(model, backend=backend)
    handler.seen.clear()
    undo = None
    try:
        with contextlib.redirect_stdout(handler):
            for n in range(calls):
                if n == 1:
                    undo = between(module)
                try:
                    handler.seen.append(("value", model(torch.ones(2)).tolist()))
                except Exception as exc:  # noqa: BLE001 - compared between the programs
                    handler.seen.append(("raised", type(exc).__name__))
    finally:
        if undo is not None:
            undo()  # the next program's logger of this name is the same object
    return list(handler.seen)


def _same(tmp_path, program, handler, between=lambda module: None):
    result = fix_program(program, codes=("GM2",))
    assert [f.rule for f in result.applied] == ["GM202"], [d.reason for d in result.declined]
    for backend in ("uncompiled", "eager", "aot_eager"):
        want = _observe(tmp_path, program, backend, handler, between)
        assert _observe(tmp_path, result.text, backend, handler, between) == want, backend
    return want


EXC_INFO = '''import logging

import torch

logger = logging.getLogger("gm_red.exc")


class M(torch.nn.Module):
    def forward(self, x):
        try:
            {}["k"]
        except KeyError:
            logger.error("lookup failed", exc_info=True)
        return x * 2
'''


def test_exc_info_in_an_except_block_shows_the_exception_being_handled(tmp_path, capture):
    """Was: the op (and a record's replay) called Logger._log where no exception is being
    handled: the record lost its KeyError. The call is made at a graph break now, as written."""
    want = _same(tmp_path, EXC_INFO, capture)
    assert ("log", "gm_red.exc", "lookup failed", 13, "forward", "KeyError") in want


EXCEPTION_IN_HELPER = '''import logging

import torch

logger = logging.getLogger("gm_red.helper")


class M(torch.nn.Module):
    def report(self):
        logger.exception("lookup failed")

    def forward(self, x):
        try:
            {}["k"]
        except KeyError:
            self.report()
        return x * 2
'''


def test_logger_exception_in_a_method_called_from_an_except_block_shows_the_exception(tmp_path, capture):
    """The rule sees no `except` around `logger.exception` (it is in its caller's): the call was
    made in the graph, where the KeyError being handled is gone."""
    want = _same(tmp_path, EXCEPTION_IN_HELPER, capture)
    assert ("log", "gm_red.helper", "lookup failed", 10, "report", "KeyError") in want


PLAIN = '''import logging

import torch

logger = logging.getLogger("gm_red.plain")


class Loud(logging.Logger):
    def warning(self, msg, *args, **kwargs):
        super().warning("LOUD " + msg, *args, **kwargs)


class M(torch.nn.Module):
    def forward(self, x):
        logger.warning("w %d", 1)
        return x * 2
'''


def test_a_function_set_on_the_logger_after_the_first_call_is_called(tmp_path, capture):
    """Was: the recompile failed while Dynamo traced `_graphmend_target` (it read `__self__` of a
    function). A callee that is not a bound method is made at a graph break, as written."""
    def patch(module):
        module.logger.warning = lambda msg, *args: print("patched " + msg % args)
        return lambda: vars(module.logger).pop("warning")

    want = _same(tmp_path, PLAIN, capture, patch)
    assert want[-2:] == [("out", "patched w 1"), ("value", [2.0, 2.0])]


@pytest.mark.parametrize("change", [
    "class", "class method", "name", "disabled", "level", "handler", "filter", "propagate",
])
def test_the_logger_changed_between_calls_without_recompiling(tmp_path, capture, change):
    """Held: the op looks the method up by name when the graph runs, and Logger._log reads the
    logger's state then."""
    def between(module):
        logger, saved = module.logger, logging.Logger.warning
        if change == "class":
            logger.__class__ = module.Loud
        elif change == "class method":
            logging.Logger.warning = lambda self, msg, *args: print("class " + msg % args)
        elif change == "name":
            logger.name = "gm_red.renamed"
        elif change == "disabled":
            logger.disabled = True
        elif change == "level":
            logger.setLevel(logging.ERROR)
        elif change == "handler":
            logger.addHandler(capture)  # the record is shown twice: here and by the parent
        elif change == "filter":
            logger.addFilter(lambda record: setattr(record, "msg", "filtered " + record.msg) or True)
        elif change == "propagate":
            logger.propagate = False

        def undo():
            logging.Logger.warning = saved
            logger.__class__ = logging.Logger
            logger.name, logger.disabled, logger.propagate = "gm_red.plain", False, True
            logger.setLevel(logging.NOTSET)
            logger.handlers.clear()
            logger.filters.clear()

        return undo

    _same(tmp_path, PLAIN, capture, between)


UNNAMED_EXCEPTION = EXCEPTION_IN_HELPER.replace('logger = logging.getLogger("gm_red.helper")', (
    'def getLogger(name):\n    made = logging.Logger(name)\n    made.parent = logging.getLogger("gm_red")\n    return made\n\n\n'
    'logger = getLogger("gm_red.helper")'))


def test_logger_exception_of_a_logger_made_directly_in_a_method_called_from_an_except_block(tmp_path, capture):
    """Was: recorded and replayed after the graph, where the exception being handled is gone. The
    runtime names the method by the function a Logger class defines (`exception`), and makes the
    call at a graph break."""
    want = _same(tmp_path, UNNAMED_EXCEPTION, capture)
    assert [e for e in want if e[0] == "log"][0][-1] == "KeyError"
