"""GM301 differential tests: original vs lowered program on random inputs, failing path included.

Each hypothesis example runs in a throwaway process (an assertion that went wrong could leave
state behind): the original in eager mode, the fixed program in eager mode and compiled with
the eager and aot_eager backends (fullgraph: the lowered checks must not break the graph). For
every input: the same values, or the same exception type and message; and the text printed by
the calls that returned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.transforms._side_effect_support import RUNNER_PRELUDE, fix_program  # noqa: E402

PROGRAM = '''import torch


class Check(torch.nn.Module):
    def forward(self, x, y):
        h = x * 2 + y
        if (h < -50).any():
            raise ValueError("h below -50")
        if not torch.isfinite(h).all():
            raise OverflowError("h is not finite")
        elif torch.equal(y, torch.zeros_like(y)):
            raise ZeroDivisionError('y is all zero: "no scale"')
        print("ok", h.sum())
        return h / y.abs().clamp_min(1)
'''

RUNNER = RUNNER_PRELUDE + textwrap.dedent('''
    import contextlib, io

    original = load(sys.argv[1], "original")
    fixed = load(sys.argv[2], "fixed")
    cases = json.loads(open(sys.argv[3]).read())
    arms = {
        "original": original.Check(),
        "fixed-eager": fixed.Check(),
        "fixed-eager-backend": torch.compile(fixed.Check(), backend="eager", fullgraph=True),
        "fixed-aot_eager": torch.compile(fixed.Check(), backend="aot_eager", fullgraph=True),
    }
    report = {}
    for arm, model in arms.items():
        results = []
        for x, y in cases:
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    value = model(torch.tensor(x), torch.tensor(y))
                results.append(["value", [repr(v) for v in value.tolist()], out.getvalue()])
            except Exception as exc:
                results.append(["raise", type(exc).__name__, str(exc)])
        report[arm] = results
    print(json.dumps(report))
''')

finite = st.floats(-40, 40, allow_nan=False, width=32)
special = st.sampled_from([float("inf"), float("-inf"), float("nan"), -1000.0, 0.0])
values = st.one_of(finite, finite, special)
pair = st.tuples(st.lists(values, min_size=3, max_size=3), st.lists(st.one_of(finite, st.just(0.0)), min_size=3, max_size=3))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    result = fix_program(PROGRAM)
    assert [f.rule for f in result.applied] == ["GM301", "GM301", "GM302", "GM201"]
    assert all(f.safety.value == "safe" for f in result.applied if f.rule.startswith("GM3"))
    tmp = tmp_path_factory.mktemp("trap")
    (tmp / "original.py").write_text(PROGRAM)
    (tmp / "fixed.py").write_text(result.text)
    return tmp


def _run(files, cases):
    (files / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(files / "original.py"), str(files / "fixed.py"), str(files / "cases.json")],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@settings(max_examples=2, deadline=None, derandomize=True)
@given(cases=st.lists(pair, min_size=6, max_size=6))
def test_failing_and_passing_paths_agree(files, cases):
    # Always include one input of each outcome so every example exercises every path.
    cases = cases + [
        ([-30.0, 0.0, 1.0], [1.0, 1.0, 1.0]),  # ValueError
        ([float("inf"), 0.0, 1.0], [1.0, 1.0, 1.0]),  # OverflowError
        ([1.0, 2.0, 3.0], [0.0, 0.0, 0.0]),  # ZeroDivisionError (torch.equal, GM302), message with quotes
        ([1.0, 2.0, 3.0], [0.0, -0.0, 0.0]),  # -0.0 == 0.0 for torch.equal and for ==
        ([1.0, 2.0, 3.0], [1.0, -2.0, 3.0]),  # value
    ]
    report = _run(files, cases)
    expected = report["original"]
    assert {r[1] for r in expected[-5:-1]} == {"ValueError", "OverflowError", "ZeroDivisionError"}
    for arm in ("fixed-eager", "fixed-eager-backend", "fixed-aot_eager"):
        assert report[arm] == expected, arm
