"""Soundness holes of the boundary (issues 17 and 18), each reproduced against the original program.

Every case runs the original and the rewritten program, eager and compiled (real Dynamo, eager
backend, CPU), and compares what they print, return and raise:

a. the compiled entry is not a boundary (a lambda or a torch container around the module): the
   runtime records only while an eager boundary runs the compiled call, otherwise the call runs
   as written (and breaks the graph as before) — nothing lost, nothing replayed into a later call;
b. a module of this file that holds the printing one fails after it in the same graph: the
   records of a graph that raises are lost, so the call is recorded only under the compiled
   entries where nothing may fail after it (``entries=``) and runs as written under the others
   (and with a boundary that replays on the exception path, what was recorded before a graph
   break is shown before the exception propagates);
c. a forward that prints, calls a module-level helper that prints, and prints again: the helper
   is deferred to the same boundary, and the lines come out in program order.
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import GraphCounter, fix_program, load_module, reset_dynamo  # noqa: E402


def _outcome(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            value = fn(*args)
        except Exception as exc:  # noqa: BLE001 - the outcome is compared
            return out.getvalue(), ("raised", type(exc).__name__, str(exc).splitlines()[0])
    return out.getvalue(), ("returned", value.tolist() if isinstance(value, torch.Tensor) else value)


def _pair(tmp_path, program, threshold=Safety.SAFE):
    result = fix_program(program, threshold=threshold)
    return result, load_module(tmp_path, program), load_module(tmp_path, result.text)


PRINTS = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        print("m", x.sum())
        return x * 2
'''


@pytest.mark.parametrize("entry", ["lambda", "nn.Sequential", "function of another module"])
def test_a_compiled_entry_that_is_not_a_boundary_keeps_the_output(tmp_path, entry):
    result, original, fixed = _pair(tmp_path, PRINTS)
    assert [(f.rule, f.safety) for f in result.applied] == [("GM201", Safety.SAFE)]
    outcomes = []
    for mod in (original, fixed):
        reset_dynamo()
        m = mod.M()
        if entry == "lambda":
            compiled = torch.compile(lambda x: m(x) + 1, backend="eager")
        elif entry == "nn.Sequential":
            compiled = torch.compile(torch.nn.Sequential(m, torch.nn.Identity()), backend="eager")
        else:
            def step(x):
                return m(x) - 1
            compiled = torch.compile(step, backend="eager")
        calls = [_outcome(compiled, torch.ones(2)), _outcome(compiled, torch.full((2,), 3.0)), _outcome(m, torch.ones(2))]
        outcomes.append(calls)
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][0][0] == "m tensor(2.)\n" and outcomes[0][2][0] == "m tensor(2.)\n"
    assert fixed._graphmend_region().head is fixed._graphmend_region().root, "no record left pending"


def test_a_boundary_entry_still_defers_after_a_non_boundary_entry_ran(tmp_path):
    """The depth the runtime reads while tracing is guarded: the graph traced under the lambda
    (call kept) is not reused under the module's own boundary (call recorded), and back."""
    _, _, fixed = _pair(tmp_path, PRINTS)
    reset_dynamo()
    m = fixed.M()
    counter = GraphCounter()
    around = torch.compile(lambda x: m(x) + 1, backend=counter)
    own = torch.compile(m, backend=counter)
    got = [_outcome(f, torch.ones(2))[0] for f in (around, own, own, around, own)]
    assert got == ["m tensor(2.)\n"] * 5
    graphs = counter.graphs
    _outcome(own, torch.ones(2))
    _outcome(around, torch.ones(2))
    assert counter.graphs == graphs, "no recompilation once both entries are compiled"


LOWERED = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x * 2
'''


def test_a_trap_under_a_non_boundary_entry_raises_the_original_exception(tmp_path):
    result, original, fixed = _pair(tmp_path, LOWERED)
    assert [(f.rule, f.safety) for f in result.applied] == [("GM301", Safety.SAFE)]
    outcomes = []
    for mod in (original, fixed):
        reset_dynamo()
        m = mod.M()
        compiled = torch.compile(lambda x: m(x) + 1, backend="eager")
        outcomes.append([_outcome(compiled, torch.ones(2)), _outcome(compiled, -torch.ones(2))])
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][1][1] == ("raised", "ValueError", "negative input")


OUTER_FAILS = '''import torch


class Inner(torch.nn.Module):
    def forward(self, x):
        print("inner", x.sum())
        return x * 2


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x, idx):
        y = self.inner(x)
        return y[idx]
'''


def test_a_failure_in_the_enclosing_module_after_the_call_keeps_the_call_under_that_entry(tmp_path):
    result, original, fixed = _pair(tmp_path, OUTER_FAILS)
    [fix] = result.applied
    assert fix.safety is Safety.SAFE
    assert 'print("inner", x.sum())' not in result.text
    assert "_graphmend_deferred(print, \"call\", entries=(__name__ + '.Inner',))(\"inner\", x.sum())" in result.text
    assert "`y[idx]` at line 17 (in Outer.forward, which may run after this call" in fix.notes
    for args in ((torch.ones(2), torch.tensor(5)), (torch.ones(2), torch.tensor(1))):
        got = []
        for mod in (original, fixed):
            reset_dynamo()
            got.append(_outcome(torch.compile(mod.Outer(), backend="eager"), *args))
        assert got[1] == got[0]
    assert got[0] == ("inner tensor(2.)\n", ("returned", 2.0))
    # Under the entry where nothing fails after it, the call is deferred: one graph.
    reset_dynamo()
    counter = GraphCounter()
    inner = torch.compile(fixed.Inner(), backend=counter)
    assert _outcome(inner, torch.ones(2)) == _outcome(original.Inner(), torch.ones(2))
    assert counter.graphs == 1


def test_the_unrestricted_rewrite_would_lose_the_output(tmp_path):
    """Why the entry restriction is needed: recorded under Outer, the graph raises and the record
    made before the failure inside it is lost."""
    result, original, fixed = _pair(tmp_path, OUTER_FAILS)
    text = result.text.replace(", entries=(__name__ + '.Inner',)", "")
    assert text != result.text
    unrestricted = load_module(tmp_path, text)
    reset_dynamo()
    lost = _outcome(torch.compile(unrestricted.Outer(), backend="eager"), torch.ones(2), torch.tensor(5))
    reset_dynamo()
    kept = _outcome(torch.compile(fixed.Outer(), backend="eager"), torch.ones(2), torch.tensor(5))
    assert lost[0] == "" and kept[0] == "inner tensor(2.)\n"
    assert lost[1][:2] == kept[1][:2] == ("raised", "IndexError")


REPLAY_ON_RAISE = '''import torch


class Inner(torch.nn.Module):
    def forward(self, x):
        print("inner", x.sum())
        return x * 2


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        y = self.inner(x)
        total = y.sum().item()  # a graph break: the first graph returned, its records are applied
        if total > 100:
            raise OverflowError("too large")
        return y
'''


@pytest.mark.parametrize("compiled", [False, True])
def test_records_before_a_break_are_replayed_in_order_when_the_call_then_raises(tmp_path, compiled):
    result, original, fixed = _pair(tmp_path, REPLAY_ON_RAISE)
    assert [(f.rule, f.safety) for f in result.applied] == [("GM201", Safety.SAFE)]
    got = []
    for mod in (original, fixed):
        reset_dynamo()
        model = mod.Outer()
        run = torch.compile(model, backend="eager") if compiled else model
        got.append([_outcome(run, torch.ones(2)), _outcome(run, torch.full((2,), 60.0)), _outcome(run, torch.ones(2))])
    assert got[1] == got[0]
    assert got[0][1] == ("inner tensor(120.)\n", ("raised", "OverflowError", "too large"))


HELPER = '''import torch


def helper(x):
    print("helper", x.sum())
    return x + 1


class M(torch.nn.Module):
    def forward(self, x):
        print("first", x.sum())
        y = helper(x)
        print("last", y.sum())
        return y
'''


def test_a_module_level_helper_is_deferred_to_its_callers_boundary_in_program_order(tmp_path):
    result, original, fixed = _pair(tmp_path, HELPER)
    assert [(f.rule, f.line, f.safety) for f in result.applied] == [
        ("GM201", 5, Safety.SAFE), ("GM201", 11, Safety.SAFE), ("GM201", 13, Safety.SAFE)]
    reset_dynamo()
    counter = GraphCounter()
    compiled = torch.compile(fixed.M(), backend=counter)
    expected = _outcome(original.M(), torch.ones(2))
    assert expected[0] == "first tensor(2.)\nhelper tensor(2.)\nlast tensor(4.)\n"
    assert _outcome(compiled, torch.ones(2)) == expected
    assert _outcome(compiled, torch.ones(2)) == expected
    assert counter.graphs == 1
    # The helper called from a compiled function of another module: no boundary, kept as written.
    reset_dynamo()
    alone = torch.compile(lambda x: fixed.helper(x) * 2, backend="eager")
    assert _outcome(alone, torch.ones(2)) == _outcome(lambda x: original.helper(x) * 2, torch.ones(2))
