"""The eager boundary under real Dynamo (torch 2.13, CPU, counting backend).

What must hold for the deferred-side-effect and trap rules to be sound and useful: one graph
and no break whatever way the module is compiled; records replayed in order after each
compiled call; no recompilation from the records; a boundary nested in an outer compiled
region does not break that region's graph; trapped exceptions restored with type and message.
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")

from tests.transforms._side_effect_support import GraphCounter, fix_program, graph_breaks, load_module, reset_dynamo  # noqa: E402

PROGRAM = '''import torch


class Inner(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("inner", y.sum())
        if (y < 0).any():
            raise ValueError("negative input")
        return y + 1


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        print("outer", x.shape)
        return self.inner(x) * 3


@torch.compile(backend="eager")
def step(x):
    print("step", x.sum())
    return x + 1
'''

EXPECTED_ONE_CALL = "outer torch.Size([2])\ninner tensor(4.)\n"


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    result = fix_program(PROGRAM)
    assert [f.rule for f in result.applied] == ["GM201", "GM301", "GM201", "GM201"]
    return load_module(tmp_path_factory.mktemp("boundary"), result.text)


def _run(fn, *inputs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        results = [fn(x) for x in inputs]
    return results, out.getvalue()


def _pending(mod) -> bool:
    region = mod._graphmend_region()  # this thread's record chain
    return region.head is not region.root


@pytest.mark.parametrize("how", ["torch.compile(module)", "module.compile()", "fullgraph"])
def test_one_graph_no_break_records_replayed_in_order(mod, how):
    reset_dynamo()
    counter = GraphCounter()
    if how == "module.compile()":
        model = mod.Outer()
        model.compile(backend=counter)
    else:
        model = torch.compile(mod.Outer(), backend=counter, fullgraph=how == "fullgraph")
    x = torch.ones(2)
    results, text = _run(model, x, x, x)
    assert counter.graphs == 1, "records must not cause recompilation"
    assert graph_breaks() == 0
    assert text == EXPECTED_ONE_CALL * 3
    eager_results, eager_text = _run(mod.Outer(), x)
    assert eager_text == EXPECTED_ONE_CALL
    torch.testing.assert_close(results[0], eager_results[0])
    assert not _pending(mod)


def test_a_boundary_inlined_without_an_eager_boundary_keeps_the_calls(mod):
    # The compiled entry is a lambda defined elsewhere: the module's boundary is only inlined and
    # no boundary runs after the compiled call, so nothing may be recorded (it would never be
    # replayed). The calls run as written, breaking the graph as the original did; nothing is
    # left pending for a later call.
    reset_dynamo()
    model = mod.Outer()
    outer = torch.compile(lambda x: model(x) + 1, backend="eager")
    _, text = _run(outer, torch.ones(2))
    assert text == EXPECTED_ONE_CALL and graph_breaks() >= 1
    assert not _pending(mod)
    _, text = _run(mod.Outer(), torch.ones(2))
    assert text == EXPECTED_ONE_CALL


def test_records_left_by_a_non_boundary_call_are_an_error_never_a_later_replay(mod):
    # Defence in depth: should records ever be left pending (an older runtime copy in another
    # file records under any entry), the next boundary call reports them and drops them.
    region = mod._graphmend_region()
    region.head = mod._graphmend_runtime.Record((print, ("stale",)), region.head)
    with pytest.raises(RuntimeError, match="1 deferred print/logging/warnings call"):
        _run(mod.Outer(), torch.ones(2))
    assert not _pending(mod)
    _, text = _run(mod.Outer(), torch.ones(2))
    assert text == EXPECTED_ONE_CALL


def test_compiled_function_in_the_module_is_a_boundary(mod):
    reset_dynamo()
    results, text = _run(mod.step, torch.ones(2), torch.ones(3))
    assert text == "step tensor(2.)\nstep tensor(3.)\n"
    assert graph_breaks() == 0


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_trap_restores_type_and_message(mod, backend):
    reset_dynamo()
    model = torch.compile(mod.Outer(), backend=backend, fullgraph=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(ValueError) as info:
        model(-torch.ones(2))
    assert str(info.value) == "negative input" and type(info.value) is ValueError
    assert info.value.__context__ is None
    # the prints before the check are made in the graph (the runtime's ordered op), so they come
    # out before the error, as the original printed them
    eager = io.StringIO()
    with contextlib.redirect_stdout(eager), pytest.raises(ValueError):
        mod.Outer()(-torch.ones(2))
    assert out.getvalue() == eager.getvalue() == "outer torch.Size([2])\ninner tensor(-4.)\n"
    _, text = _run(model, torch.ones(2))  # the model still works afterwards
    assert text == EXPECTED_ONE_CALL


def test_eager_mode_is_untouched(mod):
    with pytest.raises(ValueError, match="^negative input$") as info:
        _run(mod.Outer(), -torch.ones(2))
    # the original raise statement is what raised, on its original line
    assert info.traceback[-1].lineno + 1 == 9


def test_boundary_keeps_signature_and_survives_dynamo_reset(mod):
    import inspect

    assert list(inspect.signature(mod.Outer.forward).parameters) == ["self", "x"]
    for _ in range(2):
        reset_dynamo()
        counter = GraphCounter()
        _, text = _run(torch.compile(mod.Outer(), backend=counter), torch.ones(2))
        assert text == EXPECTED_ONE_CALL and counter.graphs == 1


def test_without_the_boundary_the_region_would_break():
    """The baseline the rules remove: print and a tensor-guarded raise each break the graph."""
    namespace: dict = {}
    exec(compile(PROGRAM.replace('@torch.compile(backend="eager")', ""), "<original>", "exec"), namespace)
    reset_dynamo()
    counter = GraphCounter()
    _run(torch.compile(namespace["Outer"](), backend=counter), torch.ones(2))
    assert graph_breaks() >= 3 and counter.graphs >= 3


def test_records_of_graphs_that_returned_are_shown_before_an_exception(tmp_path):
    """A raise Dynamo cannot lower (a custom exception) breaks the graph: the graph before it
    returned and applied its records, so the boundary prints them before the exception
    propagates, as the original printed before raising."""
    program = (
        "import torch\n\n\nclass Bad(Exception):\n    pass\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        print('before', x.sum())\n        if (x < 0).any():\n"
        "            raise Bad('negative')\n        return x\n"
    )
    result = fix_program(program)
    # unsafe: a tensor's value is not known while Dynamo traces `(x < 0).any()` after it (which may
    # fail there, on a complex x), so a failed trace would lose it; applied here at --unsafe-fixes
    assert [f.rule for f in result.applied] == ["GM201"] and result.applied[0].safety.value == "unsafe"
    assert "may fail while Dynamo traces it" in result.applied[0].notes
    assert [d.rule for d in result.declined] == ["GM301"]
    fixed = load_module(tmp_path, result.text)
    reset_dynamo()
    model = torch.compile(fixed.M(), backend="eager")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(fixed.Bad, match="^negative$"):
        model(-torch.ones(2))
    assert out.getvalue() == "before tensor(-2.)\n"
    assert not _pending(fixed)


def test_wrapping_a_compiled_callable_defined_elsewhere(mod):
    """What the fix notes tell users whose compiled entry lives outside the rewritten module: the
    deferred calls replay after it; a lowered check is not lowered under it (nothing proves what
    the wrapper does in the graph before the check), so the check stays a Python check."""
    reset_dynamo()
    counter = GraphCounter()
    model = mod.Outer()
    compiled = mod._graphmend_boundary(torch.compile(lambda x: model(x) + 1, backend=counter))
    results, text = _run(compiled, torch.ones(2), torch.ones(2))
    assert text == EXPECTED_ONE_CALL * 2 and not _pending(mod)
    assert graph_breaks() >= 1  # the check's own break: only a proven entry lowers it
    with pytest.raises(ValueError, match="^negative input$"):
        _run(compiled, -torch.ones(2))
