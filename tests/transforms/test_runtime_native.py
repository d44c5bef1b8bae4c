"""Why the runtime, not PyTorch's native in-graph operations, replays deferred output (issue 15 item 2).

torch 2.13 has ``torch._higher_order_ops.print`` (an ordered print inside the graph) and the
``torch._dynamo.config.ignore_logging_functions`` / ``reorderable_logging_functions`` levers. A
rewrite may use one only where the output is identical to the original. These tests record what
was measured: where a native form differs, the test shows the difference, so a torch upgrade that
removes it fails here and tells us the native form can be adopted (gated on that version).
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")
hop_print = pytest.importorskip("torch._higher_order_ops").print


def _compiled_output(fn, backend, *args):
    torch._dynamo.reset()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return out.getvalue()


def test_native_print_matches_for_plain_values_with_str_conversions():
    def native(x):
        y = x.sum()
        hop_print("scaled{!s}{!s} {!s}", ": ", y, 3)
        return y

    for backend in ("eager", "aot_eager"):
        assert _compiled_output(native, backend, torch.ones(3)) == "scaled: tensor(3.) 3\n"


def test_native_print_loses_grad_fn_under_aot_autograd_so_it_is_not_used():
    def original(x):
        y = (x * 2).sum()
        print("v", y)
        return y

    def native(x):
        y = (x * 2).sum()
        hop_print("v {!s}", y)
        return y

    x = torch.ones(3, requires_grad=True)
    eager = io.StringIO()
    with contextlib.redirect_stdout(eager):
        original(x)
    assert eager.getvalue() == "v tensor(6., grad_fn=<SumBackward0>)\n"
    assert _compiled_output(native, "eager", x) == eager.getvalue()
    # AOT autograd (aot_eager, inductor) runs the graph on plain tensors: the text differs.
    assert _compiled_output(native, "aot_eager", x) == "v tensor(6.)\n"


def test_native_print_formats_a_0d_tensor_as_a_number_without_str_conversion():
    def native(x):
        hop_print("v {}", x.sum())
        return x

    assert _compiled_output(native, "eager", torch.ones(3)) == "v 3.0\n"


def test_reorderable_logging_functions_lose_the_output_of_a_call_that_fails():
    # A compile-site lever, not a source edit: print (here) is moved after the graph, which has no
    # graph break, but a graph that fails after it loses it, where the original printed first.
    def f(x, idx):
        print("a", x.sum())
        return (x * 2)[idx]

    def outcome(fn, idx):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                fn(torch.ones(2), idx)
            except IndexError:
                return out.getvalue(), "IndexError"
        return out.getvalue(), None

    assert outcome(f, torch.tensor(5)) == ("a tensor(2.)\n", "IndexError")
    torch._dynamo.reset()
    with torch._dynamo.config.patch(reorderable_logging_functions={print}):
        compiled = torch.compile(f, backend="eager")
        assert outcome(compiled, torch.tensor(1)) == ("a tensor(2.)\n", None)
        assert outcome(compiled, torch.tensor(5)) == ("", "IndexError")
