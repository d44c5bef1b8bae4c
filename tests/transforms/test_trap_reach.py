"""What may run before a lowered check (``_reach``): only code that can run between an entry's
``forward`` and the check counts, and a check in a module-level helper is lowered only under the
entries whose paths to it write nothing first.

Static tests use GM303 (GM301 shares the analysis through ``_trap.state_written_before``);
the differential test runs the original and the fixed program eagerly and compiled (eager and
aot_eager backends), both outcomes of each check, and compares values, exceptions and the
module state left after the call.
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

from graphmend.model import Decline, Fix, Safety  # noqa: E402
from graphmend.transforms.base import RuleContext, SourceFile  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from graphmend.transforms.registry import get_rule  # noqa: E402
from tests.transforms._side_effect_support import RUNNER_PRELUDE  # noqa: E402

GM303 = get_rule("GM303")
GM301 = get_rule("GM301")


def _outcome(text: str, rule=GM303, line=None):
    source = SourceFile("prog.py", text)
    outcomes = rule.run(source, RuleContext(file="prog.py", device="cpu", verified=line is not None),
                        {line} if line is not None else None)
    assert len(outcomes) == 1, outcomes
    return outcomes[0]


HEAD = "import torch\n\n\n"
CHECK = "        assert x.max().item() <= n\n"

# VALID for the old analysis' false alarms: these now get a safe fix.
UNRELATED_WRITES = [
    # weight initialisation and a setter never run inside forward
    HEAD + "class M(torch.nn.Module):\n    def _init_weights(self, module):\n        module.weight.data.zero_()\n"
    "        self.initialised = True\n\n    def set_scale(self, s):\n        self.scale = s\n\n"
    "    def forward(self, x, n):\n" + CHECK + "        return x * 2\n",
    # a helper that writes state, called only after the check
    HEAD + "class M(torch.nn.Module):\n    def _count(self):\n        self.calls = 1\n\n"
    "    def forward(self, x, n):\n" + CHECK + "        self._count()\n        return x * 2\n",
    # an outer module whose forward calls this one first; its other methods write
    HEAD + "class Inner(torch.nn.Module):\n    def forward(self, x, n):\n" + CHECK + "        return x * 2\n\n\n"
    "class Outer(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.inner = Inner()\n\n"
    "    def reset(self):\n        self.seen = []\n\n    def forward(self, x, n):\n        n = n + 1\n"
    "        return self.inner(x, n) + 1\n",
]

# INVALID for the new analysis: a write (or an unknown call) that can run before the check.
WRITES_BEFORE = [
    (HEAD + "class M(torch.nn.Module):\n    def _count(self):\n        self.calls = 1\n\n"
     "    def forward(self, x, n):\n        self._count()\n" + CHECK + "        return x * 2\n",
     "`self.calls = ...` at line 6 (in _count, called at line 9)"),
    (HEAD + "class M(torch.nn.Module):\n    def _count(self, x):\n        return self._more(x)\n\n"
     "    def _more(self, x):\n        x.add_(1)\n        return x\n\n"
     "    def forward(self, x, n):\n        x = self._count(x)\n" + CHECK + "        return x * 2\n",
     "`x.add_(1)` updates a tensor in place"),
    (HEAD + "class M(torch.nn.Module):\n    def forward(self, x, n):\n        x = helper(x)\n" + CHECK
     + "        return x * 2\n", "calls helper(), which is not known to leave state unchanged"),
    (HEAD + "class M(torch.nn.Module):\n    def forward(self, x, n):\n        x = self.norm(x)\n" + CHECK
     + "        return x * 2\n", "calls a method or submodule not defined in this file"),
    (HEAD + "class M(torch.nn.Module):\n    def forward(self, x, n):\n        self.prepare(x)\n" + CHECK
     + "        return x * 2\n", "not defined in this file"),
    (HEAD + "class Inner(torch.nn.Module):\n    def forward(self, x, n):\n" + CHECK + "        return x * 2\n\n\n"
     "class Outer(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.layers = torch.nn.ModuleList([Inner()])\n\n"
     "    def forward(self, x, n):\n        return self.layers[0](x, n)\n",
     "Outer refers to Inner other than as `self.name = Inner(...)`"),
    (HEAD + "class M(torch.nn.Module):\n    def __init__(self, f):\n        super().__init__()\n        self.step = f\n\n"
     "    def step(self, x):\n        return x\n\n    def forward(self, x, n):\n        x = self.step(x)\n" + CHECK
     + "        return x\n", "may call an attribute that shadows the method step()"),
    (HEAD + "class M(torch.nn.Module):\n    def forward(self, x, n):\n        for _ in range(2):\n" + "    " + CHECK
     + "            x.mul_(2)\n        return x\n", "`x.mul_(2)` updates a tensor in place"),
]


@pytest.mark.parametrize("text", UNRELATED_WRITES)
def test_writes_that_cannot_run_before_the_check_do_not_block(text):
    fix = _outcome(text)
    assert isinstance(fix, Fix) and fix.safety is Safety.SAFE, fix
    assert "entries=(__name__ + " in fix.edits[0].new_text  # lowered only under the entries proven clean


@pytest.mark.parametrize("text,reason", WRITES_BEFORE)
def test_writes_or_unknown_calls_before_the_check_block(text, reason):
    outcome = _outcome(text)
    assert isinstance(outcome, Decline), outcome
    assert reason in outcome.reason, outcome.reason


def test_gm301_shares_the_analysis():
    clean = HEAD + ("class M(torch.nn.Module):\n    def _init_weights(self, m):\n        self.done = True\n\n"
                    "    def forward(self, x):\n        if (x < 0).any():\n            raise ValueError(\"negative\")\n"
                    "        return x\n")
    assert isinstance(_outcome(clean, GM301), Fix)
    dirty = clean.replace("    def forward(self, x):\n", "    def forward(self, x):\n        self._init_weights(x)\n")
    outcome = _outcome(dirty, GM301)
    assert isinstance(outcome, Decline) and "`self.done = ...`" in outcome.reason, outcome


HELPER = HEAD + '''def get_masks(slen, lengths):
    assert lengths.max().item() <= slen
    return torch.arange(slen) < lengths[:, None]


class Clean(torch.nn.Module):
    def forward(self, x, lengths):
        mask = get_masks(x.size(1), lengths)
        return x * mask


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, lengths):
        self.calls += 1
        mask = get_masks(x.size(1), lengths)
        return x * mask
'''


def test_helper_check_is_lowered_only_under_clean_entries():
    fix = _outcome(HELPER)
    assert isinstance(fix, Fix) and fix.safety is Safety.SAFE, fix
    assert "AssertionError, '', False, entries=(__name__ + '.Clean',))" in fix.edits[0].new_text


def test_a_method_s_check_is_lowered_only_under_the_entries_that_write_nothing_first():
    # Outer writes state before calling Inner: under a compiled Outer the check stays a Python check
    # (the runtime compares the entry); a compiled Inner lowers it.
    text = (HEAD + "class Inner(torch.nn.Module):\n    def forward(self, x, n):\n" + CHECK + "        return x * 2\n\n\n"
            "class Outer(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.inner = Inner()\n\n"
            "    def forward(self, x, n):\n        self.calls = n\n        return self.inner(x, n) + 1\n")
    fix = _outcome(text)
    assert isinstance(fix, Fix) and fix.safety is Safety.SAFE, fix
    assert "entries=(__name__ + '.Inner',))" in fix.edits[0].new_text


@pytest.mark.parametrize("change,reason", [
    # the helper passed around as a value: its callers cannot all be found
    (("        mask = get_masks(x.size(1), lengths)\n        return x * mask\n\n\nclass Counting",
      "        fn = get_masks\n        return x * fn(x.size(1), lengths)\n\n\nclass Counting"), "other than by a call"),
    # the only clean caller catches the assertion: under compile its handler would not see it
    (("        mask = get_masks(x.size(1), lengths)\n        return x * mask\n\n\nclass Counting",
      "        try:\n            mask = get_masks(x.size(1), lengths)\n        except AssertionError:\n"
      "            mask = x > 0\n        return x * mask\n\n\nclass Counting"), "inside the `try` at line 11"),
])
def test_helper_declines(change, reason):
    outcome = _outcome(HELPER.replace(*change))
    assert isinstance(outcome, Decline), outcome
    assert reason in outcome.reason, outcome.reason


def test_helper_with_no_caller_here_is_declined():
    """No entry of the file reaches the helper: a call without ``entries=`` is never lowered, so
    the rewrite would change nothing (an outside compile site cannot be proven)."""
    text = HELPER.split("\n\n\nclass Clean")[0] + "\n"
    outcome = _outcome(text)
    assert isinstance(outcome, Decline), outcome
    assert "no compiled entry of this file is proven" in outcome.reason


RUNNER = RUNNER_PRELUDE + textwrap.dedent('''
    original = load(sys.argv[1], "original")
    fixed = load(sys.argv[2], "fixed")
    report = {}
    for values, lengths in json.loads(open(sys.argv[3]).read()):
        x = torch.tensor(values, dtype=torch.float32)
        lengths = torch.tensor(lengths)
        for cls in ("Clean", "Counting"):
            plain, eager = getattr(original, cls)(), getattr(fixed, cls)()
            arms = [("original", plain, plain, None), ("fixed-eager", eager, eager, None)]
            for backend in ("eager", "aot_eager"):
                torch._dynamo.reset()
                count = Count(backend)
                model = getattr(fixed, cls)()
                arms.append((backend, torch.compile(model, backend=count), model, count))
                # a compiled entry that is not a boundary: the helper's check runs as written
                inner = getattr(fixed, cls)()
                arms.append((backend + "-lambda", torch.compile(lambda a, b, m=inner: m(a, b), backend=backend), inner, None))
            for arm, call, module, count in arms:
                try:
                    out = ["value", call(x, lengths).tolist()]
                except Exception as exc:
                    out = ["raise", type(exc).__name__, str(exc)]
                out.append(getattr(module, "calls", None))
                report.setdefault(cls + "/" + arm, []).append(out + ([count.graphs] if count else []))
    print(json.dumps(report))
''')

case = st.tuples(st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=1, max_size=2),
                 st.integers(0, 5))


@pytest.fixture(scope="module")
def helper_files(tmp_path_factory):
    result = fix_text("prog.py", HELPER, RuleContext(file="prog.py", device="cpu"), [GM303])
    assert len(result.applied) == 1
    tmp = tmp_path_factory.mktemp("reach")
    (tmp / "original.py").write_text(HELPER)
    (tmp / "fixed.py").write_text(result.text)
    return tmp


@settings(max_examples=1, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate))
@given(cases=st.lists(case, min_size=2, max_size=2))
def test_helper_differential_both_outcomes(helper_files, cases):
    # Both outcomes of the check under each entry: a length within the sequence (passes) and
    # one past it (AssertionError). Under Counting, whose forward writes `self.calls` first, a
    # lowered check would fail the graph and lose that write: the check must run as written.
    runs = [[rows, [min(n, len(rows[0]))] * len(rows)] for rows, n in cases]
    runs += [[[[1, 2, 3]], [3]], [[[1, 2, 3]], [4]], [[[1, -2, 3], [0, 1, 1]], [2, 9]]]
    (helper_files / "cases.json").write_text(json.dumps(runs))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(helper_files / "original.py"), str(helper_files / "fixed.py"),
                           str(helper_files / "cases.json")], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for cls in ("Clean", "Counting"):
        want = report[f"{cls}/original"]
        assert [w[0] for w in want[-3:]] == ["value", "raise", "raise"]
        for arm in ("fixed-eager", "eager", "aot_eager", "eager-lambda", "aot_eager-lambda"):
            got = [g[:len(w)] for g, w in zip(report[f"{cls}/{arm}"], want)]
            assert got == want, (cls, arm, got, want)
    # Under the clean entry the passing calls compile to one graph (the check is in it).
    clean = report["Clean/eager"]
    assert all(r[-1] == 1 for r in clean if r[0] == "value"), clean
