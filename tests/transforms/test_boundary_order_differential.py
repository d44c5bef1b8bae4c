"""Differential test (issue 18): deferred output comes out in program order whatever nesting made it.

Hypothesis generates a chain of module classes (each forward prints before and/or after calling
the next), module-level helper functions that print (called from some forwards, some calling
another helper), and picks the compiled entry. The program is fixed at the default safety with
the real rules, then the original and the rewritten programs run compiled (eager backend, CPU)
and eager: printed text and results must be identical.
"""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphmend.model import Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

step = st.sampled_from(["print", "helper", "none"])


@st.composite
def programs(draw):
    depth = draw(st.integers(1, 3))
    helpers = draw(st.integers(0, 2))
    chained = helpers == 2 and draw(st.booleans())  # helper 1 calls helper 0
    lines = ["import torch", "", ""]
    for h in range(helpers):
        lines += [f"def helper{h}(x):", f'    print("helper{h}", x.sum())']
        if chained and h == 1:
            lines += ["    x = helper0(x)"]
        lines += ["    return x + 1", "", ""]
    for level in range(depth):
        before, after = draw(step), draw(step)
        lines += [f"class M{level}(torch.nn.Module):"]
        if level + 1 < depth:
            lines += ["    def __init__(self):", "        super().__init__()", f"        self.inner = M{level + 1}()", ""]
        lines += ["    def forward(self, x):"]
        for where, what in (("before", before), ("after", after)):
            if what == "print":
                lines += [f'        print("M{level} {where}", x.sum())']
            elif what == "helper" and helpers:
                lines += [f"        x = helper{draw(st.integers(0, helpers - 1))}(x)"]
            if where == "before" and level + 1 < depth:
                lines += ["        x = self.inner(x) * 2"]
        lines += ["        return x + 1", "", ""]
    entry = draw(st.integers(0, depth - 1))
    return "\n".join(lines).rstrip() + "\n", entry


def _run(fn, x):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn(x)
    return out.getvalue(), value.tolist()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(programs())
def test_deferred_output_keeps_program_order(tmp_path, case):
    program, entry = case
    result = fix_program(program, codes=("GM2",), threshold=Safety.SAFE)
    original, fixed = load_module(tmp_path, program), load_module(tmp_path, result.text)
    x = torch.arange(3.0)
    expected = _run(getattr(original, f"M{entry}")(), x)
    assert _run(getattr(fixed, f"M{entry}")(), x) == expected, "eager"
    reset_dynamo()
    compiled = torch.compile(getattr(fixed, f"M{entry}")(), backend="eager")
    assert _run(compiled, x) == expected, result.text
    assert _run(compiled, x) == expected, "second call"
    region = getattr(fixed, "_graphmend_region", None)  # absent when nothing was rewritten
    assert region is None or region().head is region().root
