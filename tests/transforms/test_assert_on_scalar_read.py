"""GM303 assert-on-scalar-read: declines, safety, and a differential test over both outcomes.

The differential test runs the original program and the fixed one (eager, and compiled with the
eager and aot_eager backends) in a throwaway process on random dtypes, values and Python numbers:
the same value, or the same exception type and message, for every case; and one graph (no break)
wherever the comparison on the tensor is exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
from hypothesis import Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphmend.model import Decline, Safety  # noqa: E402
from graphmend.transforms.base import RuleContext, SourceFile  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from graphmend.transforms.registry import get_rule  # noqa: E402
from tests.transforms._side_effect_support import RUNNER_PRELUDE  # noqa: E402

RULE = get_rule("GM303")

PROGRAM = '''import torch


class Check(torch.nn.Module):
    def forward(self, x, n, m):
        slen = x.size(0) * 4
        assert x.max().item() <= slen
        assert m < x.min().item(), "m too large"
        y = x * 2
        assert y.sum().item() != n
        return y
'''


def _outcomes(text: str, lines=None, threshold=Safety.SAFE):
    source = SourceFile("prog.py", text)
    ctx = RuleContext(file="prog.py", threshold=threshold, device="cpu", verified=lines is not None)
    return RULE.run(source, ctx, lines)


def _one(text: str):
    (outcome,) = _outcomes(text)
    return outcome


def _module(body: str) -> str:
    return "import torch\n\n\nclass M(torch.nn.Module):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def test_fix_is_safe_in_a_forward_and_keeps_every_line():
    result = fix_text("prog.py", PROGRAM, RuleContext(file="prog.py", device="cpu"), [RULE])
    assert [(f.rule, f.safety) for f in result.applied] == [("GM303", Safety.SAFE)] * 3
    old, new = PROGRAM.splitlines(), result.text.splitlines()
    assert new[:6] == old[:6] and new[8] == old[8]  # only the assert lines change
    assert new[10] == "        return y" == old[10]  # same line count: tracebacks and log locations stay
    entries = "entries=(__name__ + '.Check',)"  # lowered only under the entry proven here
    assert f"assert _graphmend_trap(_graphmend_item_compare(x.max(), \"<=\", slen), AssertionError, '', False, {entries})" in new[6]
    assert f"_graphmend_item_compare(m, \"<\", x.min(), \"right\"), AssertionError, 'm too large', False, {entries}), \"m too large\"" in new[7]
    assert "_graphmend_item_compare(y.sum(), \"!=\", n)" in new[9]


def test_module_level_helper_without_an_entry_is_declined():
    """No compiled entry of the file reaches the helper: the runtime would keep the Python check
    under every entry (a wrapped compile site elsewhere included: its code cannot be proven)."""
    text = ("import torch\n\n\ndef get_masks(slen, lengths):\n    assert lengths.max().item() <= slen\n"
            "    return torch.arange(slen) < lengths[:, None]\n")
    decline = _one(text)
    assert isinstance(decline, Decline), decline
    assert "no compiled entry of this file is proven" in decline.reason and "_graphmend_boundary" in decline.reason


@pytest.mark.parametrize("body,reason", [
    ("def forward(self, x, n):\n    assert x.max().item() <= n, f'{n}'\n    return x\n", "not a string literal"),
    ("def forward(self, x, y):\n    assert x.max().item() <= y.max().item()\n    return x\n", "reads 2 scalars"),
    ("def forward(self, x, n):\n    assert 0 <= x.max().item() <= n\n    return x\n", "chained comparison"),
    ("def forward(self, x, n):\n    assert x.max().item() * 2 <= n\n    return x\n", "not a whole side"),
    ("def forward(self, x, n):\n    assert x.max().item() in n\n    return x\n", "`is`/`in`"),
    ("def forward(self, x, n):\n    assert x.max().item()\n    return x\n", "not one comparison"),
    ("def forward(self, x, n):\n    assert (x.max().item()\n            <= n)\n    return x\n", "several lines"),
    ("def forward(self, x, n):\n    try:\n        assert x.max().item() <= n\n    except AssertionError:\n"
     "        x = x * 0\n    return x\n", "inside the `try`"),
    ("def forward(self, x, n):\n    self.calls += 1\n    assert x.max().item() <= n\n    return x\n", "may write state"),
])
def test_declines_name_the_failed_condition(body, reason):
    outcome = _one(_module(body))
    assert isinstance(outcome, Decline), outcome
    assert reason in outcome.reason, outcome.reason


def test_module_rebinding_assertion_error_is_declined():
    text = "import torch\n\nAssertionError = ValueError\n\n\n" + _module(
        "def forward(self, x, n):\n    assert x.max().item() <= n\n    return x\n").split("\n\n\n", 1)[1]
    outcome = _one(text)
    assert isinstance(outcome, Decline) and "AssertionError" in outcome.reason


def test_dynamic_mode_takes_only_reported_lines():
    assert _outcomes(PROGRAM, lines={7}) and all(o.line == 7 for o in _outcomes(PROGRAM, lines={7}))
    assert _outcomes(PROGRAM, lines={3}) == []


def test_gm401_leaves_assert_comparisons_to_gm303():
    text = _module("def forward(self, x, n):\n    assert x.max().item() <= n\n    return x\n")
    gm401 = get_rule("GM401")
    (outcome,) = gm401.run(SourceFile("prog.py", text), RuleContext(device="cpu", verified=True), {6})
    assert isinstance(outcome, Decline) and "GM303" in outcome.reason


RUNNER = RUNNER_PRELUDE + textwrap.dedent('''
    original = load(sys.argv[1], "original")
    fixed = load(sys.argv[2], "fixed")
    report = {"original": [], "fixed-eager": [], "eager": [], "aot_eager": []}
    for values, dtype, n, m in json.loads(open(sys.argv[3]).read()):
        x = torch.tensor(values, dtype=getattr(torch, dtype))
        arms = [("original", original.Check(), None), ("fixed-eager", fixed.Check(), None)]
        for backend in ("eager", "aot_eager"):
            torch._dynamo.reset()
            count = Count(backend)
            arms.append((backend, torch.compile(fixed.Check(), backend=count), count))
        for arm, model, count in arms:
            try:
                out = ["value", [repr(v) for v in model(x, n, m).float().tolist()]]
            except Exception as exc:
                out = ["raise", type(exc).__name__, str(exc), repr(exc.args)]
            report[arm].append(out + ([count.graphs] if count else []))
    print(json.dumps(report))
''')

DTYPES = ["int64", "int32", "int16", "int8", "uint8", "float64", "float32", "float16", "bfloat16"]
LIMIT = {"float64": 2 ** 53, "float32": 2 ** 24, "float16": 2 ** 11, "bfloat16": 2 ** 8}
RANGE = {"int64": (-2 ** 63, 2 ** 63 - 1), "int32": (-2 ** 31, 2 ** 31 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
         "int8": (-128, 127), "uint8": (0, 255)}
# Python numbers near the edges where a tensor comparison stops being exact.
numbers = st.one_of(
    st.integers(-20, 40),
    st.sampled_from([2 ** 24 + 1, -(2 ** 24) - 1, 2 ** 11 + 1, 300, -1, 2 ** 53 + 1, 2 ** 63 + 5]),
    st.sampled_from([0.1, 2.5, -0.5, 1e300, float("inf")]),
)
case = st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=4), st.sampled_from(DTYPES), numbers, numbers)


def _exact(dtype: str, other) -> bool:
    """The rule's promise, restated: where the comparison on the tensor equals the Python one."""
    if isinstance(other, float):
        return dtype == "float64"
    if dtype in RANGE:
        lo, hi = RANGE[dtype]
        return lo <= other <= hi
    return -LIMIT[dtype] <= other <= LIMIT[dtype]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    result = fix_text("prog.py", PROGRAM, RuleContext(file="prog.py", device="cpu"), [RULE])
    assert len(result.applied) == 3
    tmp = tmp_path_factory.mktemp("gm303")
    (tmp / "original.py").write_text(PROGRAM)
    (tmp / "fixed.py").write_text(result.text)
    return tmp


@settings(max_examples=1, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate))
@given(cases=st.lists(case, min_size=4, max_size=4))
def test_differential_both_outcomes(files, cases):
    # Every example covers each assertion failing and all of them passing, with exact and
    # inexact comparisons (a float32 tensor against 0.1; an int8 tensor against 300).
    cases = [list(c) for c in cases] + [
        [[50, 1], "int64", 7, -1],       # first assert fails: 50 > 2 * 4
        [[3, 1], "int64", 7, 5],         # second fails, with its message
        [[3, 1], "int64", 8, 0],         # third fails: sum(y) == 8
        [[1], "float32", 8, 0.999999999],  # passes in Python; float32 would round m to 1.0 and fail
        [[3, 1], "int8", 300, -129],     # passes; -129 is outside int8: the Python comparison
        [[3, 1], "float64", 7.5, 0.5],   # passes, all exact
    ]
    (files / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(files / "original.py"), str(files / "fixed.py"),
                           str(files / "cases.json")], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = report["original"]
    assert [r[1] for r in expected[-6:-3]] == ["AssertionError"] * 3
    assert report["fixed-eager"] == expected  # eager: the very same exception, args included
    for backend in ("eager", "aot_eager"):
        for (values, dtype, n, m), want, got in zip(cases, expected, report[backend]):
            # Type and message equal; a bare `assert` restored from the assertion has args ('',)
            assert got[:-1][:3] == want[:3], (backend, values, dtype, n, m, got, want)
            slen = len(values) * 4
            if want[0] == "value" and _exact(dtype, slen) and _exact(dtype, m) and _exact(dtype, n):
                assert got[-1] == 1, (backend, values, dtype, n, m, "expected one graph")
