"""Deferred calls made while Dynamo traces a frame whose trace then fails (runtime side).

``graphmend::deferred``'s fake kernel records the call it stands for while Dynamo traces it, when
its arguments hold no tensor. A trace that fails (a ``Linear`` given the wrong width, an index held
in a Python int out of range) builds no graph, so the op never runs: the boundary makes the calls
that attempt recorded, in program order, with the original's location and rules, then raises the
error unchanged, as the original (whose call broke the graph before the trace of the rest began)
showed its output before failing. A trace that built its graph drops its records (the graph makes
the calls), and so does one whose failure Dynamo swallowed (it runs the frame eagerly).

Each program runs original and fixed, uncompiled and compiled with the backends eager and
aot_eager, on calls that pass, that fail in the trace, that recompile (another batch size: the
size printed is a SymInt while tracing) and that restart the analysis (a graph break after the
calls): printed text, warnings and log records (with their locations) in one ordered stream, and
each call's value or exception, must be the same.
"""

from __future__ import annotations

import logging
import warnings

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import load_module, reset_dynamo  # noqa: E402
from tests.transforms.test_deferral_cross_file import Events  # noqa: E402

PROGRAM = '''import logging
import warnings

import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 2)

    def forward(self, x, i: int):
        print("projecting", x.shape, x.dim(), 2.5, None)
        warnings.warn("careful", FutureWarning)
        logging.warning("width %d", 4)
        {middle}
        return self.proj(x)[i] * 2
'''

OK, WIDE, INDEX = (torch.ones(1, 4), 0), (torch.ones(1, 3), 0), (torch.ones(1, 4), 5)
CALLS = [OK, WIDE, OK, WIDE, INDEX, (torch.ones(3, 4), 1), (torch.ones(2, 3), 0), OK, (torch.ones(5, 4), 4)]
MIDDLES = {"one-graph": "pass", "graph-break-after": "torch._dynamo.graph_break()",
           "graph-break-before": "y = x.sum().item()"}


def _fixed(text: str) -> str:
    result = fix_text("m.py", text, RuleContext(file="m.py", device="cpu"))
    assert sorted(f.rule for f in result.applied) == ["GM201", "GM202", "GM203"], result.skipped
    assert all(f.safety is Safety.SAFE for f in result.applied), [f.notes for f in result.applied]
    return result.text


def _observe(model, calls, action: str):
    """Printed text, warnings (with their file and line) and root log records in one ordered list,
    and each call's value or exception type and first line."""
    events = Events()
    root = logging.getLogger()
    level = root.level
    root.addHandler(events)
    root.setLevel(logging.DEBUG)
    try:
        outcomes = events.calls(model, calls, action)
    finally:
        root.removeHandler(events)
        root.setLevel(level)
    return events.seen, outcomes


def _run(tmp_path, text: str, how: str, calls, action: str = "always", **options):
    module = load_module(tmp_path, text, stem="m")
    warnings.onceregistry.clear()
    reset_dynamo()
    torch.manual_seed(0)
    model = module.M()
    if how != "uncompiled":
        model = torch.compile(model, backend=how, **options)
    return _observe(model, calls, action)


def _same(tmp_path, text: str, calls, how: str, action: str = "always", kinds: bool = True):
    """The fixed program compiled with ``how`` against the original: its output (text, warnings,
    records, their lines) is what the original shows uncompiled, its values and exceptions what the
    original gives compiled the same way. (The original compiled runs what follows its graph break
    in a resume function, for which Python may report a warning one line early; the order and the
    kinds of its output are checked too.)"""
    shown, _ = _anonymous(_run(tmp_path, text, "uncompiled", calls, action))
    compiled, outcomes = _anonymous(_run(tmp_path, text, how, calls, action))
    got = _anonymous(_run(tmp_path, _fixed(text), how, calls, action))
    assert got == (shown, outcomes), how
    if kinds:
        assert [e[:2] for e in compiled] == [e[:2] for e in shown], how
    return got


def _anonymous(observed):
    """Without the file names (each program is imported from a file of its own)."""
    events, outcomes = observed
    return [e[:-1] if e[0] == "log" else e[:3] + e[4:] if e[0] == "warn" else e for e in events], outcomes


@pytest.mark.parametrize("how", ["uncompiled", "eager", "aot_eager"])
@pytest.mark.parametrize("middle", sorted(MIDDLES))
def test_output_before_an_error_found_while_tracing_is_shown_once_before_it(tmp_path, how, middle):
    text = PROGRAM.format(middle=MIDDLES[middle])
    events, outcomes = _same(tmp_path, text, CALLS, how)
    kinds = [o[0] if o[0] == "value" else o[1] for o in outcomes]
    assert kinds[:5] == ["value", "RuntimeError" if how == "uncompiled" else "TorchRuntimeError", "value",
                         kinds[1], "IndexError"], kinds
    # every call shows its three outputs once, the failing ones included, before its error
    kinds = [e[0] for e in events]
    assert kinds.count("warn") == kinds.count("log") == len(CALLS)
    # the batch of 2 with the wrong width is traced with a SymInt batch size: shown as the call's own
    assert ("out", "torch.Size([2, 3])") in events


@pytest.mark.parametrize("action", ["once", "default"])
def test_the_warnings_registry_of_a_failed_trace_is_the_module_s_own(tmp_path, action):
    """"once" and "default" keep a warning shown in a registry: a warning shown for a failed trace
    counts there, as the original's eager call does, and is not shown again by the next failed
    trace nor by the graph once it compiles. (Python forgets a module's registry when the warnings
    filters change, and AOTAutograd changes them when it compiles, torch 2.13: the original compiled
    shows the warning again after its graph compiles, and so would the fixed program: those calls
    are left out with aot_eager.)"""
    text = PROGRAM.format(middle="pass")
    for how, calls in (("eager", [WIDE, WIDE, OK, OK, WIDE]), ("aot_eager", [WIDE, WIDE, WIDE])):
        events, _ = _same(tmp_path, text, calls, how, action, kinds=False)
        assert [e[0] for e in events].count("warn") == 1


def test_a_trace_that_succeeds_shows_nothing_of_its_own(tmp_path):
    """The records of a trace that built its graph are dropped: the graph makes the calls, once
    per call, and the later failed trace (a recompile for another batch size) shows its own calls
    only."""
    text = PROGRAM.format(middle="pass")
    fixed = _fixed(text)
    events, outcomes = _run(tmp_path, fixed, "aot_eager", [OK, OK, (torch.ones(2, 4), 3)])
    assert [o[0] for o in outcomes] == ["value", "value", "raised"]
    assert [e[0] for e in events].count("warn") == 3 and [e[0] for e in events].count("log") == 3


def test_a_failure_dynamo_swallows_runs_the_frame_eagerly_and_shows_nothing_twice(tmp_path):
    """Under ``suppress_errors`` Dynamo runs a frame whose trace failed eagerly: the calls are made
    there as written; the records of the failed trace are never shown."""
    text = PROGRAM.format(middle="pass")
    with torch._dynamo.config.patch(suppress_errors=True):
        for how in ("eager", "aot_eager"):
            events, outcomes = _same(tmp_path, text, [OK, WIDE, OK, WIDE], how)
            assert [o[0] for o in outcomes] == ["value", "raised", "value", "raised"]
            assert [e[0] for e in events].count("warn") == 4


def test_fullgraph_shows_the_calls_before_an_error_found_while_tracing(tmp_path):
    """Under ``fullgraph=True`` the original fails at its print's graph break; the fixed program
    has none: a shape error found while tracing the rest comes after its calls, as in eager mode.
    A graph break left in the frame is Dynamo refusing the compile, before anything of it ran:
    nothing is shown for it."""
    fixed = _fixed(PROGRAM.format(middle="pass"))
    events, outcomes = _run(tmp_path, fixed, "eager", [WIDE, OK], fullgraph=True)
    assert [o[0] for o in outcomes] == ["raised", "value"]
    assert [e[0] for e in events].count("warn") == 2
    broken = _fixed(PROGRAM.format(middle="torch._dynamo.graph_break()"))
    events, outcomes = _run(tmp_path, broken, "eager", [WIDE, OK], fullgraph=True)
    assert [o[1] for o in outcomes] == ["Unsupported", "Unsupported"] and events == []


def test_a_call_given_a_tensor_is_not_shown_from_a_trace(tmp_path):
    """A tensor's value is not known while tracing: the runtime cannot show such a call from a
    failed trace, nor any call after it (what is shown stays a prefix of the program's output)."""
    fixed = _fixed(PROGRAM.format(middle="pass")).replace('2.5, None)', '2.5, None, x.sum())', 1)
    events, outcomes = _run(tmp_path, fixed, "eager", [WIDE, OK])
    assert [o[0] for o in outcomes] == ["raised", "value"]
    kinds = [e[0] for e in events]
    # the failed call showed nothing (its first call holds a tensor); the next one all three
    assert kinds.count("warn") == kinds.count("log") == 1 and kinds[-2:] == ["warn", "log"]
    assert ("out", "tensor(4.)") in events and ("out", "torch.Size([1, 3])") not in events
