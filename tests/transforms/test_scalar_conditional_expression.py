"""GM402 conditional-expression-on-tensor: must-decline cases, differential tests (original vs
rewritten on random inputs taking both outcomes), and the break gone under Dynamo."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphmend.detect.dynamic import _Recorder
from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.conditional_expression_on_tensor import ConditionalExpressionOnTensor
from graphmend.transforms.engine import fix_text

RULE = ConditionalExpressionOnTensor()
CTX = RuleContext(threshold=Safety.UNSAFE, verified=True)


def fix(program: str, ctx: RuleContext = CTX):
    result = fix_text("m.py", program, ctx, [RULE], {"GM402": range(1, 100)})
    assert not result.failed, result.failed
    return result


def load(program: str):
    namespace: dict = {}
    exec(compile(program, "<program>", "exec"), namespace)  # noqa: S102 - test programs
    return namespace["f"]


@pytest.mark.parametrize(
    "expr,why",
    [
        ("x * 2 if training else x", "is a tensor condition"),
        ("x * 2 if x.sum().item() > 0 else x", "`.item()`"),
        ("torch.rand_like(x) if x.any() else x", "random"),
        ("x if x.sum() > 0 else 0.0", "Python value `0.0`"),
        ("x if x.sum() > 0 else None", "None"),
        ("x.add_(1) if x.any() else x", "in place"),
        ("x[y.argmax()] if x.any() else x", "computed index"),
        ("x // 2 if x.any() else x", "integer division"),
        ("x * 2 if x.dtype == torch.float16 and x.any() else x", "Python value"),
        ("x * 2 if torch.equal(x, y) else x", "Python bool"),
    ],
)
def test_must_decline(expr, why):
    program = f"import torch\n\ndef f(x, y, training=True):\n    return {expr}\n"
    # Unverified: a verified break on `training` would prove it a tensor (GM101's trusted mode).
    result = fix(program, RuleContext(threshold=Safety.UNSAFE))
    assert result.text == program and not result.applied
    assert any(why in d.reason for d in result.declined), [d.reason for d in result.declined]


PREDICATES = ["x.sum() > 0", "(x > 0).any()", "(x > 0).all()", "x.mean() >= 0 or (y > 0).all()", "not (x < 0).any()"]
VALUES = ["x * 2", "x + 1", "x.abs()", "torch.tanh(x)", "x - y", "torch.maximum(x, y)", "-x", "x.float()", "y[0]"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pred=st.sampled_from(PREDICATES),
    a=st.sampled_from(VALUES),
    b=st.sampled_from(VALUES),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
    y_shape=st.sampled_from([(5,), (1,), (2, 5)]),
    sign=st.sampled_from([-1.0, 1.0]),
    seed=st.integers(0, 1000),
)
def test_differential(pred, a, b, dtype, y_shape, sign, seed):
    program = f"import torch\n\ndef f(x, y):\n    return {a} if {pred} else {b}\n"
    result = fix(program)
    original = load(program)
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(5, generator=g) * sign).to(dtype)  # all positive or all negative: both outcomes
    y = torch.randn(y_shape, generator=g).to(dtype)
    try:
        expected = original(x, y)
    except Exception as exc:  # noqa: BLE001 - the rewrite must raise the same type
        with pytest.raises(type(exc)):
            load(result.text)(x, y)
        return
    got = load(result.text)(x, y)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (program, result.text)
    assert torch.equal(got, expected), (program, result.text)


def test_break_removed_under_dynamo():
    program = "import torch\n\ndef f(x, y):\n    h = torch.relu(x)\n    s = h * 2 if h.mean() > 0.5 else h - 1\n    return s + y\n"
    result = fix(program)
    assert result.applied and result.applied[0].rule == "GM402"

    def compiled_run(fn, *args):
        torch._dynamo.reset()
        recorder = _Recorder()
        with recorder.installed():
            out = torch.compile(fn, backend=recorder.backend(None))(*args)
        return out, recorder.graphs, [e.gb_type for e in recorder.events]

    for x in (torch.full((4,), 2.0), torch.full((4,), 0.1)):  # both outcomes
        y = torch.randn(4)
        before, graphs_before, breaks_before = compiled_run(load(program), x, y)
        after, graphs_after, breaks_after = compiled_run(load(result.text), x, y)
        assert "Data-dependent branching" in breaks_before and graphs_before >= 2
        assert breaks_after == [] and graphs_after == 1
        assert torch.equal(before, after)
