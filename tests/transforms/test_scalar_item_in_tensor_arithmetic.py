"""GM401: must-decline cases, differential tests (original vs rewritten over dtypes, operators,
operand orders and conversions), and the break gone under Dynamo where the tensor path is proven."""

from __future__ import annotations

import functools
import math
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphmend.detect.dynamic import _Recorder
from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.engine import fix_text
from graphmend.transforms.scalar_item_in_tensor_arithmetic import ScalarItemInTensorArithmetic

RULE = ScalarItemInTensorArithmetic()
CTX = RuleContext(threshold=Safety.SAFE, verified=True)
ALL_LINES = {"GM401": range(1, 200)}


@functools.lru_cache(maxsize=None)  # the differential test draws from a few hundred programs
def fixed(program: str) -> str:
    program = textwrap.dedent(program)
    result = fix_text("m.py", program, CTX, [RULE], ALL_LINES)
    assert not result.failed, result.failed
    return result.text


def load(program: str, name: str = "f"):
    namespace: dict = {}
    exec(compile(program, "<program>", "exec"), namespace)  # noqa: S102 - test programs
    return namespace[name]


def declined(program: str) -> list[str]:
    result = fix_text("m.py", textwrap.dedent(program), CTX, [RULE], ALL_LINES)
    assert not result.applied and not result.failed
    return [d.reason for d in result.declined]


@pytest.mark.parametrize(
    "program,why",
    [
        ("import torch\ndef f(x, t):\n    for _ in range(t.item()):\n        x = x + 1\n    return x\n", "loop's iterable"),
        ("import torch\ndef f(x, t):\n    if t.item() > 0:\n        x = x + 1\n    return x\n", "decides Python control flow (an `if` test)"),
        ("import torch\ndef f(x, t):\n    return t.item() * 2 * x\n", "Python number `2`"),
        ("import torch\ndef f(x, t):\n    return t.item() / x\n", "reciprocal"),
        ("import torch\ndef f(x, t):\n    return x ** t.item()\n", "`**`"),
        ("import torch\ndef f(x, t):\n    return x // int(t)\n", "`//`"),
        ("import torch\ndef f(x, t):\n    return x % float(t)\n", "`//` and `%`"),
        ("import torch\ndef f(x, y, t):\n    return (x + y) * t.item()\n", "not a plain name"),
        ("import torch\ndef f(x, t):\n    return x < t.item() < 2 * x\n", "chained comparison"),
        ("import torch\ndef f(x, t):\n    n = t.item()\n    y = x * n\n    return y[:n]\n", "Python number"),
        ("import torch\ndef f(x, t):\n    n = t.item()\n    n = n + 1\n    return x * n\n", "bound again"),
        ("import torch\ndef f(x, t):\n    s = t.item()\n    return [x * s for _ in range(2)]\n", "comprehension"),
        ("import torch\ndef f(x, t):\n    s = t.item()\n    print(s)\n    return x * s\n", "`print()`"),
        ("import torch\nfloat = int\ndef f(x, t):\n    return x * float(t)\n", "rebinds `float`"),
    ],
)
def test_must_decline(program, why):
    reasons = declined(program)
    assert reasons and any(why in r for r in reasons), reasons


def test_static_mode_offers_only_fixable_sites():
    program = "import torch\ndef f(x, t, cfg):\n    n = int(cfg.size)\n    return x[:n] * t.item()\n"
    result = fix_text("m.py", program, RuleContext(threshold=Safety.SAFE), [RULE])
    assert not result.declined  # `int(cfg.size)` feeding a slice is not reported in static mode
    assert "_graphmend_scalar(t, x[:n]" not in result.text  # `x[:n]` is not a plain read
    assert result.text == program


def test_fix_is_safe_and_adds_helper_once():
    program = "import torch\ndef f(x, t, u):\n    a = x * t.item()\n    return a + u.item()\n"
    result = fix_text("m.py", program, CTX, [RULE], ALL_LINES, rounds=1)
    assert [f.safety for f in result.applied] == [Safety.SAFE, Safety.SAFE]
    assert result.text.count("def _graphmend_scalar(") == 1
    f = load(result.text)
    x, t, u = torch.randn(5), torch.tensor(0.5), torch.tensor(2.0)
    assert torch.equal(f(x, t, u), load(program)(x, t, u))


# ------------------------------------------------------------------------------------------
# Differential: every operator, order and conversion the rule rewrites, over dtype pairs.

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int32, torch.int64,
          torch.uint8, torch.bool]
OPS = ["+", "-", "*", "/", ">", "<=", "==", "!="]
INLINE = {
    "item": "t.item()",
    "float": "float(t)",
    "int": "int(t)",
}


def _program(op: str, conversion: str, scalar_left: bool, named: bool) -> str:
    scalar = INLINE[conversion]
    if named:
        head = f"    s = {scalar}\n"
        scalar = "s"
    else:
        head = ""
    expr = f"{scalar} {op} x" if scalar_left else f"x {op} {scalar}"
    return f"import torch\n\ndef f(x, t):\n{head}    return {expr}\n"


def _tensor(dtype: torch.dtype, shape: tuple, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 8).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    low = 0 if dtype == torch.uint8 else -50
    return torch.randint(low, 50, shape, generator=g).to(dtype)


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared by type
        return ("raised", type(exc))
    return out


def _same(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()])
    return torch.equal(a, b)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(OPS),
    conversion=st.sampled_from(sorted(INLINE)),
    scalar_left=st.booleans(),
    named=st.booleans(),
    x_dtype=st.sampled_from(DTYPES),
    t_dtype=st.sampled_from(DTYPES),
    t_shape=st.sampled_from([(), (1,), (1, 1)]),
    seed=st.integers(0, 10_000),
)
def test_differential_values_and_dtypes(op, conversion, scalar_left, named, x_dtype, t_dtype, t_shape, seed):
    if named and conversion != "item":
        conversion = "item"  # only `.item()` is held in a name
    program = _program(op, conversion, scalar_left, named)
    rewritten = fixed(program)
    exact_op = not (scalar_left and op == "/")
    assert (rewritten != program) == exact_op, rewritten
    original, new = load(program), load(rewritten)
    x, t = _tensor(x_dtype, (6,), seed), _tensor(t_dtype, t_shape, seed + 1)
    assert _same(_outcome(original, x, t), _outcome(new, x, t)), (program, x_dtype, t_dtype, t_shape)


def test_held_value_is_a_copy_and_has_no_gradient():
    program = (
        "import torch\n\ndef f(x, t):\n    s = t.item()\n    t.add_(1)\n    return x * s\n"
    )
    new = load(fixed(program))
    x = torch.randn(4, requires_grad=True)
    t = torch.tensor(3.0)
    out = new(x, t.clone())
    assert torch.equal(out, (x * 3.0)) and t.item() == 3.0
    w = torch.tensor(2.0, requires_grad=True)
    out = load(fixed("import torch\n\ndef f(x, w):\n    return x * w.item()\n"))(x, w)
    out.sum().backward()
    assert w.grad is None and torch.equal(x.grad, torch.full((4,), 2.0))


def test_non_tensor_values_convert_as_before():
    program = "import torch\n\ndef f(x, cfg):\n    return x * float(cfg)\n"
    new = load(fixed(program))
    x = torch.arange(3)
    assert torch.equal(new(x, 2), x * 2.0) and new(x, 2).dtype == torch.float32


# ------------------------------------------------------------------------------------------
# Under Dynamo: the break is gone where the tensor path is proven, and stays where it is not.


def _compiled_run(fn, *args):
    torch._dynamo.reset()
    recorder = _Recorder()
    compiled = torch.compile(fn, backend=recorder.backend(None))
    with recorder.installed():
        out = compiled(*args)
    return out, recorder.graphs, [e.gb_type for e in recorder.events]


@pytest.mark.parametrize("named", [False, True])
def test_break_removed_under_dynamo(named):
    if named:
        program = "import torch\n\ndef f(x, w):\n    s = w.sum().item()\n    h = torch.relu(x)\n    return h * s - 1\n"
    else:
        program = "import torch\n\ndef f(x, w):\n    h = torch.relu(x)\n    return h * w.sum().item() - 1\n"
    original, new = load(program), load(fixed(program))
    x, w = torch.randn(8), torch.randn(3)
    before, graphs_before, breaks_before = _compiled_run(original, x, w)
    after, graphs_after, breaks_after = _compiled_run(new, x, w)
    assert breaks_before == ["Unsupported Tensor.item() call with capture_scalar_outputs=False"]
    assert breaks_after == [] and graphs_after == 1 and graphs_before == 2
    assert torch.equal(before, after) and torch.equal(after, original(x, w))


def test_unproven_dtype_keeps_the_break_and_the_value():
    # int64 * float64 scalar: a Python float gives float32, a 0-d fp64 tensor would give fp64.
    program = "import torch\n\ndef f(x, w):\n    return x * w.item()\n"
    new = load(fixed(program))
    x, w = torch.arange(4), torch.tensor(0.1, dtype=torch.float64)
    out, graphs, breaks = _compiled_run(new, x, w)
    assert set(breaks) == {"Unsupported Tensor.item() call with capture_scalar_outputs=False"}
    assert out.dtype == torch.float32 and torch.equal(out, x * 0.1)
    assert not math.isnan(out.sum().item())
