"""GM101 differential tests: generated functions, original vs rewritten, on inputs that take
both outcomes of every predicate; eager and under torch.compile(backend="eager").

Compared: values, dtypes, shapes, the exception type when one is raised, the inputs after the
call (mutation) and the random generator's state afterwards.
"""

from __future__ import annotations

import textwrap

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

RULE = DataDependentBranch()
CTX = RuleContext(threshold=Safety.UNSAFE)

# Predicates around 0, so an all-positive and an all-negative input take opposite outcomes.
PREDICATES = ["(x > 0).any()", "(x > 0).all()", "x.sum() > 0", "x.mean() >= 0", "~(x < 0).any()",
              "(x > 0).any() and x.max() > 0.25", "x.amax() > 0 or (y > 0).all()"]
ARMS = ["x * 2", "x + 1", "x.abs()", "torch.clamp(x, min=-0.5, max=0.5)", "x - y", "torch.tanh(x)",
        "x * y", "torch.maximum(x, y)", "x.float()", "torch.where(x > y, x, y)", "-x"]

SHAPES = {
    "if-else": """
        def f(x, y):
            if {p}:
                z = {a}
            else:
                z = {b}
            return z
        """,
    "else-less": """
        def f(x, y):
            if {p}:
                x = {a}
            return x
        """,
    "returns": """
        def f(x, y):
            if {p}:
                return {a}
            return {b}
        """,
    "elif": """
        def f(x, y):
            if {p}:
                z = {a}
            elif {q}:
                z = {b}
            else:
                z = {c}
            return z
        """,
    "call": """
        def f(x, y):
            if {p}:
                z = torch.clamp({a}, min=-1.0)
            else:
                z = torch.clamp({b}, min=-1.0)
            return z
        """,
    "two-targets": """
        def f(x, y):
            if {p}:
                x = {a}
                y = y + x
            return x, y
        """,
    "setup-and-static": """
        def f(x, y):
            if x.dtype == torch.float32 and {p}:
                s = x.mean()
                x = {a} - s
            return x
        """,
}


def _program(shape: str, p: str, q: str, a: str, b: str, c: str) -> str:
    return "import torch\n\n" + textwrap.dedent(SHAPES[shape]).format(p=p, q=q, a=a, b=b, c=c).lstrip("\n")


def _load(text: str):
    ns: dict = {}
    exec(compile(text, "<generated>", "exec"), ns)
    return ns["f"]


def _call(fn, x, y):
    """(result or exception type, inputs after, rng state after) from a fixed seed."""
    x, y = x.clone(), y.clone()
    torch.manual_seed(0)
    try:
        out = fn(x, y)
    except Exception as exc:  # compare exception types, not messages
        out = type(exc)
    return out, (x, y), torch.get_rng_state()


def _same(a, b):
    if isinstance(a, type) or isinstance(b, type):
        assert a == b, (a, b)
        return
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _inputs(values, size, mismatch):
    base = torch.tensor(values[:size], dtype=torch.float32)
    y = torch.tensor(values[-size:], dtype=torch.float32).flip(0)
    if mismatch:
        y = torch.ones(size + 1)  # x * y raises on both paths, or (size 1) broadcasts
    pos, neg = base.abs() + 0.1, -(base.abs() + 0.1)
    return [(pos, y), (neg, y), (base, y), (pos, -y.abs() - 0.1)]


program_st = st.builds(
    _program,
    st.sampled_from(sorted(SHAPES)),
    st.sampled_from(PREDICATES),
    st.sampled_from(PREDICATES),
    st.sampled_from(ARMS),
    st.sampled_from(ARMS),
    st.sampled_from(ARMS),
)
values_st = st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=6, max_size=6)


# No shrinking phase: a failure prints the generated program, and the suite stays fast.
FAST = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=[Phase.explicit, Phase.generate])


@settings(max_examples=40, **FAST)
@given(program=program_st, values=values_st, size=st.integers(1, 3), mismatch=st.booleans())
def test_rewrite_equals_original_eager(program, values, size, mismatch):
    result = fix_text("gen.py", program, CTX, [RULE])
    if not result.applied:
        # The legitimate declines here: arms of evidently different dtype/shape, arms that draw
        # gradients from different tensors, an arm that may overflow (NaN gradients through the
        # select), a returned or kept value that may be the caller's own tensor.
        legit = ("dtype", "shape", "require grad", "inf/NaN", "own object", "a tensor not made in this function")
        assert result.declined and all(any(w in d.reason for w in legit) for d in result.declined), (
            program, [d.reason for d in result.declined])
        return
    assert "torch.where(" in result.text and "torch.cond" not in result.text
    fix = result.applied[0]
    if fix.safety is Safety.UNSAFE:
        # An unsafe fix states its assumption: shapes that broadcast (the inputs then meet it). The
        # caller's own tensor replaced by an equal new one is declined, never unsafe.
        assert "may raise for some shapes" in fix.notes, fix.notes
        if "may raise for some shapes" in fix.notes:
            mismatch = False
    else:
        assert fix.safety is Safety.SAFE
    before, after = _load(program), _load(result.text)
    outcomes = set()
    for x, y in _inputs(values, size, mismatch):
        exp, exp_inputs, exp_rng = _call(before, x, y)
        got, got_inputs, got_rng = _call(after, x, y)
        _same(got, exp)
        _same(got_inputs, exp_inputs)
        assert torch.equal(got_rng, exp_rng)
        outcomes.add(bool((x > 0).all()))
    assert outcomes == {True, False}  # both outcomes of the first predicate were exercised


@settings(max_examples=12, **FAST)
@given(program=program_st, values=values_st)
def test_rewrite_compiles_to_one_graph_and_matches(program, values):
    result = fix_text("gen.py", program, CTX, [RULE])
    if not result.applied:
        return
    before, after = _load(program), _load(result.text)
    torch._dynamo.reset()
    # fullgraph=True raises on any graph break: the rewrite must leave none.
    compiled = torch.compile(after, backend="eager", fullgraph=True)
    for x, y in _inputs(values, 3, False):
        exp, exp_inputs, exp_rng = _call(before, x, y)
        got, got_inputs, got_rng = _call(compiled, x, y)
        _same(got, exp)
        _same(got_inputs, exp_inputs)
        assert torch.equal(got_rng, exp_rng)
