"""Red team for the output of a failed compile (``_graphmend_traced``, ``_graphmend_show_traced``
and the boundary): a print, warning or log call deferred into the graph by GM201-GM203 must show
what the original showed when the trace, or the compile after it, fails.

Each program runs original and fixed as ``test_runtime_trace_faults`` does: the fixed program's
printed text, warnings and log records (with their lines, in one ordered stream) must be what the
original shows uncompiled, and each call's value or exception what the original gives compiled the
same way. A test marked ``xfail(strict=True)`` is a program the rules rewrite (safe) today that then
shows something else; the reason says what.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import load_module, reset_dynamo  # noqa: E402
from tests.transforms.test_runtime_trace_faults import (  # noqa: E402
    CALLS, OK, PROGRAM, WIDE, _anonymous, _fixed, _observe, _run, _same)

# The most common way to log, a module-level logger (its records reach the root's handler), and
# ``logging.log`` with a level given as an argument.
LOGGED = {
    "module logger": PROGRAM.replace("import torch\n", "import torch\n\nlogger = logging.getLogger(__name__)\n", 1).replace(
        'logging.warning("width %d", 4)', 'logger.warning("width %d", 4)'),
    "logging.log": PROGRAM.replace('logging.warning("width %d", 4)', 'logging.log(logging.WARNING, "width %d", 4)'),
}


@pytest.mark.parametrize("how", ["eager", "aot_eager"])
@pytest.mark.parametrize("form", sorted(LOGGED))
def test_a_logger_method_or_logging_log_before_an_error_found_while_tracing(tmp_path, form, how):
    text = LOGGED[form]
    assert text != PROGRAM
    _same(tmp_path, text.format(middle="pass"), CALLS, how)


def _picky(gm, example_inputs):
    """A backend that has no kernel for a linear layer (a vendor or export backend lacking an op)."""
    if any("linear" in str(node.target) for node in gm.graph.nodes):
        raise NotImplementedError("no kernel for linear")
    return gm.forward


def test_a_backend_that_fails_to_compile_the_graph(tmp_path):
    """The original made its print, warning and log at the graph break before compiling the rest;
    the fixed program's calls are in the graph that never compiles: the boundary shows what the
    failed compile's trace saw (BackendCompilerFailed carries its compile id)."""
    text = PROGRAM.format(middle="pass")
    shown, _ = _anonymous(_run(tmp_path, text, "uncompiled", [OK, OK]))
    compiled, outcomes = _anonymous(_run(tmp_path, text, _picky, [OK, OK]))
    # the original compiled shows its output before each failure, as uncompiled
    assert [o[1] for o in outcomes] == ["BackendCompilerFailed"] * 2 and compiled == shown
    assert _anonymous(_run(tmp_path, _fixed(text), _picky, [OK, OK])) == (shown, outcomes)


def test_a_backend_failure_carries_the_compile_id_of_the_trace():
    """What _graphmend_traced_failure matches the traced calls by."""
    reset_dynamo()
    compiled = torch.compile(torch.nn.Linear(4, 2), backend=_picky)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as caught:
        compiled(torch.ones(1, 4))
    assert getattr(caught.value, "compile_id", None) is not None


def test_a_backend_failure_under_suppress_errors_shows_each_call_once(tmp_path):
    """suppress_errors runs the frame whose backend failed eagerly: its calls are made there, and
    the boundary does not show the failed trace's as well."""
    text = PROGRAM.format(middle="pass")
    shown, values = _anonymous(_run(tmp_path, text, "uncompiled", [OK, OK]))
    with torch._dynamo.config.patch(suppress_errors=True):
        got = _anonymous(_run(tmp_path, _fixed(text), _picky, [OK, OK]))
    assert got == (shown, values) and [e[0] for e in shown].count("warn") == 2


# --- holding ----------------------------------------------------------------------------------


def test_a_compiled_function_that_calls_the_module(tmp_path):
    """A training step compiled around the model (a function, not the module, is what is compiled)."""
    text = PROGRAM.format(middle="pass")
    calls = [OK, WIDE, OK, WIDE]

    def run(source, compiled):
        module = load_module(tmp_path, source, stem="m")
        reset_dynamo()
        torch.manual_seed(0)
        model = module.M()

        def step(x, i):
            return model(x, i)

        return _anonymous(_observe(torch.compile(step, backend="eager") if compiled else step, calls, "always"))

    shown, _ = run(text, False)
    _, outcomes = run(text, True)
    assert [o[0] for o in outcomes] == ["value", "raised", "value", "raised"]
    assert run(_fixed(text), True) == (shown, outcomes)


NESTED = '''import logging
import warnings

import torch


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 2)

    def forward(self, x):
        print("inner", x.shape)
        warnings.warn("inner warn", FutureWarning)
        return self.proj(x)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x, i: int):
        print("outer", x.shape)
        logging.warning("outer %d", 1)
        {middle}
        y = self.inner(x)
        logging.warning("after %d", 2)
        return y[i] * 2
'''


def _fixed_all(text: str) -> str:
    result = fix_text("m.py", text, RuleContext(file="m.py", device="cpu"))
    assert result.applied and all(f.safety is Safety.SAFE for f in result.applied), result.skipped
    return result.text


def _symbols(outcomes):
    """Without the names Dynamo gives its size symbols (``s77``), which differ between compiles."""
    return [tuple(re.sub(r"\bs\d+\b", "s", str(part)) for part in o) for o in outcomes]


@pytest.mark.parametrize("how", ["eager", "aot_eager"])
@pytest.mark.parametrize("middle", ["pass", "torch._dynamo.graph_break()"])
def test_a_rewritten_module_calling_another_that_fails_while_tracing(tmp_path, how, middle):
    """Both modules' calls before the failure (in the inner one) are shown once, in order; the
    index out of range is found in the outer frame after the inner module's calls."""
    text = NESTED.format(middle=middle)
    calls = [OK, WIDE, OK, (torch.ones(1, 4), 5), (torch.ones(3, 3), 0)]
    shown, _ = _anonymous(_run(tmp_path, text, "uncompiled", calls))
    _, outcomes = _anonymous(_run(tmp_path, text, how, calls))
    events, got = _anonymous(_run(tmp_path, _fixed_all(text), how, calls))
    assert events == shown and _symbols(got) == _symbols(outcomes)
    assert [e[1] for e in events if e[0] == "warn"] == ["inner warn"] * len(calls)
    assert [o[0] for o in outcomes] == ["value", "raised", "value", "raised", "raised"]


def test_the_module_warnings_action(tmp_path):
    """"module" keeps one warning per module and text: a failed trace's warning counts there."""
    text = PROGRAM.format(middle="pass")
    events, _ = _same(tmp_path, text, [WIDE, WIDE, OK, WIDE], "eager", "module", kinds=False)
    assert [e[0] for e in events].count("warn") == 1


@pytest.mark.parametrize("how", ["Module.compile", "torch.compile(model.forward)"])
def test_the_other_ways_to_compile_a_module(tmp_path, how):
    """``model.compile()`` (in place) and a compiled bound ``forward``: the calls of a failed trace
    are shown once, before the error, with and without a graph break after them."""
    for middle in ("pass", "torch._dynamo.graph_break()"):
        text = PROGRAM.format(middle=middle)

        def run(source, compiled):
            module = load_module(tmp_path, source, stem="m")
            reset_dynamo()
            torch.manual_seed(0)
            model = module.M()
            if compiled and how == "Module.compile":
                model.compile(backend="eager")
            elif compiled:
                model = torch.compile(model.forward, backend="eager")
            return _anonymous(_observe(model, CALLS, "always"))

        shown, _ = run(text, False)
        _, outcomes = run(text, True)
        assert run(_fixed(text), True) == (shown, outcomes), middle


def test_a_size_marked_dynamic_that_the_code_specialises(tmp_path):
    """``mark_dynamic`` on a batch the rest of forward specialises (``x.shape[0] == 2``): Dynamo
    raises ConstraintViolationError after tracing the calls; they are shown before it, as the
    original made them before its rest was compiled."""
    text = PROGRAM.format(middle="y = x * 2 if x.shape[0] == 2 else x")
    calls = [(torch.ones(2, 4), 0), (torch.ones(3, 4), 0), (torch.ones(2, 4), 1)]

    def run(source, compiled):
        module = load_module(tmp_path, source, stem="m")
        reset_dynamo()
        torch.manual_seed(0)
        model = module.M()
        fn = torch.compile(model, backend="eager") if compiled else model

        def call(x, i):
            if compiled:
                torch._dynamo.mark_dynamic(x, 0)
            return fn(x, i)

        return _anonymous(_observe(call, calls, "always"))

    shown, _ = run(text, False)
    _, outcomes = run(text, True)
    assert "ConstraintViolationError" in [o[1] for o in outcomes if o[0] == "raised"], outcomes
    assert run(_fixed(text), True) == (shown, outcomes)
