"""Deferral whose boundary is in another file of the package (issue 18: layoutlmv3, bros, flava).

A ``print``/``warnings``/logging call in a base class or helper of one file (``a.py``, no
``forward`` of its own) is reached from the ``forward`` of a module class of another file
(``b.py``), the compiled entry. The rules see the stack Dynamo would report (outermost first),
read ``b.py``, and record the call only under that entry, which the runtime makes a boundary when
it is defined. Every program runs in this process under a fresh package name, original and fixed,
eager and compiled (eager backend, CPU): printed text, warnings and log records in one ordered
stream, exceptions and values must be the same.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import re
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphmend.model import Frame, Safety, files_needed  # noqa: E402
from graphmend.transforms._runtime_copy import locate, write_files  # noqa: E402
from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from graphmend.transforms.registry import all_rules  # noqa: E402
from tests.transforms._side_effect_support import captured_logger  # noqa: E402

_names = itertools.count()
RULES = [r for r in all_rules() if r.code in ("GM201", "GM202", "GM203")]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def fix_package(root: Path, stacks: dict[str, tuple], rounds: int = 2, static: bool = False):
    """The rules on every file of ``root`` (``stacks``: file -> ((line, frames), ...), what Dynamo
    would report), as the fix loop runs them: each round reads the tree the last one wrote."""
    applied, skipped = [], []
    for _ in range(rounds):
        for rel in sorted(stacks):
            text = (root / rel).read_text()
            # what fix_file gives: the lines of this file whose call ran into another file's output
            # (still there: that file's call not yet rewritten)
            reached = tuple(sorted({(f.line, f"{other}:{line}") for other in stacks if other != rel
                                    for line, frames in stacks[other] for f in frames[:-1] if f.file == rel
                                    and _output_line((root / other).read_text(), line)}))
            ctx = RuleContext(file=rel, threshold=Safety.SAFE, device="cpu", runtime=locate(root, rel),
                              root=None if static else str(root), stacks=stacks[rel], reached=reached)
            lines = {line for line, _ in stacks[rel]}
            result = fix_text(rel, text, ctx, RULES, {r.code: lines for r in RULES})
            applied += result.applied
            skipped += result.skipped
            (root / rel).write_text(result.text)
            write_files(root, files_needed(result.applied))
    return applied, skipped


def _output_line(text: str, line: int) -> bool:
    """Whether the output call at ``line`` still breaks the graph (it is not deferred)."""
    return "_graphmend_deferred(" not in text.splitlines()[line - 1]


def _forget_pkg() -> None:
    for name in [n for n in sys.modules if n == "pkg" or n.startswith("pkg.")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def _no_pkg_left_behind():
    """The last tree's `pkg` is not left imported for the next test of this worker."""
    yield
    _forget_pkg()


def load(root: Path, module: str):
    """``module`` of the tree ``root`` (the original and the fixed tree hold one package name)."""
    _forget_pkg()
    # Dynamo finds the module of an inlined function's globals by its name, through a cache of its
    # own that outlives torch._dynamo.reset(): a second tree's `pkg.a` would be read as the first's
    # (the original program's writes to a.py's globals too), so that cache is emptied here.
    getattr(torch._dynamo.symbolic_convert._import_module, "cache_clear", lambda: None)()
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))


class Events(logging.Handler):
    """Printed text, warnings and log records in one list, in the order they were made."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen: list[tuple] = []

    def write(self, text):
        if text:
            self.seen.append(("out", text))

    def flush(self):
        pass

    def emit(self, record):
        # After a graph break, Dynamo runs the rest of a function as `torch_dynamo_resume_in_<name>_at_<line>`:
        # the record's function is still `<name>` in the source
        function = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", record.funcName)
        self.seen.append(("log", record.getMessage(), record.lineno, function, Path(record.pathname).name))

    def warn(self, message, category, filename, lineno, file=None, line=None):
        self.seen.append(("warn", str(message), category.__name__, Path(filename).name, lineno))

    def calls(self, call, inputs, action: str) -> list[tuple]:
        """Each call's value, or its exception's type and first line; what the calls print and warn
        (under the warnings filter ``action``) goes to this list."""
        outcomes = []
        with warnings.catch_warnings(), contextlib.redirect_stdout(self):
            warnings.resetwarnings()
            warnings.simplefilter(action)
            warnings.showwarning = self.warn
            for args in inputs:
                try:
                    outcomes.append(("value", call(*args).tolist()))
                except Exception as exc:  # noqa: BLE001 - compared between the programs
                    outcomes.append(("raised", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""))
        return outcomes


def run(fn, *args, logger="gmx"):
    events = Events()
    with captured_logger(logger, events), warnings.catch_warnings(), contextlib.redirect_stdout(events):
        warnings.simplefilter("always")
        warnings.showwarning = events.warn
        try:
            outcome = ("value", fn(*args).tolist())
        except Exception as exc:  # noqa: BLE001 - compared between the programs
            outcome = ("raised", type(exc).__name__)
    return events.seen, outcome


def graphs_of(model, *args):
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    run(compiled, *args)
    return compiled, len(graphs)


A = '''import logging
import warnings

import torch

logger = logging.getLogger("gmx")


class Base(torch.nn.Module):
    def helper(self, x):
        warnings.warn("careful", FutureWarning)
        logger.warning("scaled by %d", 2)
        return x * 2
'''

B = '''import torch

from .a import Base


class Model(Base):
    def forward(self, x):
        y = self.helper(x) + 1
        return y.sin()


class Other(Base):
    def forward(self, x):
        return self.helper(x) * 3
'''

# A logger made directly (by a getLogger that is not logging's), not one logging.getLogger
# returns: the runtime cannot name it, so a deferred call of its methods is a record the boundary
# replays (lost when its graph fails). Bound at the end of a.py, so its lines stay those of A.
UNNAMED = '''
from .loggers import getLogger  # noqa: E402

unnamed = getLogger("gmx.unnamed")
'''

# pkg/loggers.py: loggers made directly, under the package's logger (which the tests capture).
LOGGERS = '''import logging


def getLogger(name):
    made = logging.Logger(name)
    made.parent = logging.getLogger("gmx")
    return made
'''
A_RECORD = A.replace('logger.warning("scaled by %d", 2)', 'unnamed.warning("scaled by %d", 2)') + UNNAMED

# What Dynamo reports for the two calls in a.py when Model is compiled: b.py:8 -> a.py:11/12.
STACKS = {"pkg/a.py": ((11, (Frame("pkg/b.py", 8, "forward"), Frame("pkg/a.py", 11, "helper"))),
                       (12, (Frame("pkg/b.py", 8, "forward"), Frame("pkg/a.py", 12, "helper"))))}


def _package(tmp_path: Path, a: str = A, b: str = B) -> tuple[Path, Path]:
    n = next(_names)
    orig, fixed = tmp_path / f"orig{n}", tmp_path / f"fixd{n}"
    for root in (orig, fixed):
        _write(root, {"pkg/__init__.py": "", "pkg/a.py": a, "pkg/b.py": b})
    return orig, fixed


def test_a_call_in_a_base_class_of_another_file_is_recorded_under_the_entry_named(tmp_path):
    orig, fixed = _package(tmp_path)
    applied, _ = fix_package(fixed, STACKS)
    text = (fixed / "pkg/a.py").read_text()
    assert [f.rule for f in applied] == ["GM203", "GM202"] and all(f.safety is Safety.SAFE for f in applied)
    assert "entries=(__name__.rsplit('.', 1)[0] + '.b.Model',))(\"careful\", FutureWarning)" in text
    assert (fixed / "pkg/b.py").read_text() == B  # the entry's file is read, never edited
    x = torch.arange(3.0)
    before, after = load(orig, "pkg.b"), load(fixed, "pkg.b")
    want = run(before.Model(), x)
    assert [e[0] for e in want[0]] == ["warn", "log"]
    assert run(after.Model(), x) == want
    compiled, graphs = graphs_of(after.Model(), x)
    assert graphs == 1
    assert run(compiled, x) == want and run(compiled, x) == want  # the second call reuses the graph
    # Other is not on any stack: the calls run as written there (and break its graph as before).
    compiled, graphs = graphs_of(after.Other(), x)
    original, graphs_before = graphs_of(before.Other(), x)
    assert graphs == graphs_before > 1 and run(compiled, x) == run(original, x)


@pytest.mark.parametrize("forward, why", [
    ("return y[i]", "`y[i]` at line 14 may fail"),
    ("return self.table(i) + y", "looks ids up in an embedding table"),
    ("print(y)\n        return y", "makes output of its own"),
    ("return helper_of_b(y)", "calls helper_of_b()"),
])
def test_a_failure_or_an_output_after_the_call_in_the_entry_leaves_the_call_as_written(tmp_path, forward, why):
    """The call of a logger made directly (a.py:12), a record the boundary replays: lost when the
    graph fails after it (one logging.getLogger returns is made in the graph: test_runtime_logger_op.py).
    (The warning of constants at a.py:11 is made in the graph by the op, before what fails after
    it: test_deferral_mro.py.) `helper_of_b` comes from outside the package: code not read (one of
    the package is read: the next test)."""
    b = ("import torch\n\nfrom .a import Base\nfrom json import dumps as helper_of_b\n\n\nclass Model(Base):\n"
         "    def __init__(self):\n        super().__init__()\n        self.table = torch.nn.Embedding(4, 3)\n\n"
         f"    def forward(self, x, i):\n        y = self.helper(x) + 1\n        {forward}\n")
    orig, fixed = _package(tmp_path, a=A_RECORD, b=b)
    _write(fixed, {"pkg/c.py": "def helper_of_b(y):\n    return y\n", "pkg/loggers.py": LOGGERS})
    stacks = {"pkg/a.py": ((12, (Frame("pkg/b.py", 13, "forward"), Frame("pkg/a.py", 12, "helper"))),)}
    applied, skipped = fix_package(fixed, stacks, rounds=1)
    assert applied == [] and (fixed / "pkg/a.py").read_text() == A_RECORD
    assert [s.fix.safety for s in skipped] == [Safety.UNSAFE] and why in skipped[0].fix.notes, skipped[0].fix.notes


def test_a_function_imported_from_a_file_of_the_package_after_the_call_is_read(tmp_path):
    """Before, `helper_of_b(y)` after the Logger's call was code not read, and the call stayed as
    written; its body is read in c.py now (nothing in it may fail): recorded under Model."""
    b = ("import torch\n\nfrom .a import Base\nfrom .c import helper_of_b\n\n\nclass Model(Base):\n"
         "    def forward(self, x):\n        y = self.helper(x) + 1\n        return helper_of_b(y)\n")
    orig, fixed = _package(tmp_path, b=b)
    for root in (orig, fixed):
        _write(root, {"pkg/c.py": "def helper_of_b(y):\n    return y * 2\n"})
    stacks = {"pkg/a.py": ((12, (Frame("pkg/b.py", 9, "forward"), Frame("pkg/a.py", 12, "helper"))),)}
    applied, skipped = fix_package(fixed, stacks, rounds=1)
    assert [(f.rule, f.safety) for f in applied] == [("GM202", Safety.SAFE)], [s.fix.notes for s in skipped]
    x = torch.arange(3.0)
    want = run(load(orig, "pkg.b").Model(), x)
    compiled, _ = graphs_of(load(fixed, "pkg.b").Model(), x)
    assert run(compiled, x) == want and [e[0] for e in want[0]] == ["warn", "log"]


@pytest.mark.parametrize("case, why", [
    ("static", "static mode"),
    ("outside", "outside the repository"),
    ("no package", "not in one package"),
])
def test_an_entry_that_cannot_be_read_or_named_is_not_proven(tmp_path, case, why):
    orig, fixed = _package(tmp_path)
    stacks = STACKS
    if case == "outside":
        stacks = {"pkg/a.py": ((11, (Frame("pkg/b.py", 8, "forward"), Frame("/usr/lib/x/lib.py", 3, "run", False),
                                     Frame("pkg/a.py", 11, "helper"))),)}
    if case == "no package":
        (fixed / "pkg/sub").mkdir()
        (fixed / "pkg/sub/b.py").write_text(B)
        stacks = {"pkg/a.py": ((11, (Frame("pkg/sub/b.py", 8, "forward"), Frame("pkg/a.py", 11, "helper"))),)}
    applied, skipped = fix_package(fixed, stacks, rounds=1, static=case == "static")
    assert applied == [] and why in skipped[0].fix.notes, skipped[0].fix.notes


INNER = '''import torch


class Inner(torch.nn.Module):
    def forward(self, x):
        print("inner", x.sum())
        return x * 2
'''

OUTER = '''import torch

from .a import Inner


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x, i):
        y = self.inner(x)
        z = y[i]
        print("outer")
        return z
'''


def test_a_record_of_this_file_is_not_made_under_another_files_entry_whose_graph_fails(tmp_path):
    """Inner's print is proven for Inner's own boundary only. Under Outer (another rewritten file,
    so a boundary too) the graph fails at run time after it (an index out of range): a record made
    there was lost; now the print runs as written and comes out before the error, as it did."""
    orig, fixed = _package(tmp_path, a=INNER, b=OUTER)
    stacks = {"pkg/a.py": ((6, (Frame("pkg/a.py", 6, "forward"),)),), "pkg/b.py": ((14, (Frame("pkg/b.py", 14, "forward"),)),)}
    applied, _ = fix_package(fixed, stacks, rounds=1)
    assert sorted(f.file for f in applied) == ["pkg/a.py", "pkg/b.py"]  # both deferred, both files boundaries
    x, bad = torch.arange(3.0), torch.tensor(7)
    want = run(load(orig, "pkg.b").Outer(), x, bad)
    assert want == ([("out", "inner"), ("out", " "), ("out", "tensor(3.)"), ("out", "\n")], ("raised", "IndexError"))
    fixed_b = load(fixed, "pkg.b")
    compiled, _ = graphs_of(fixed_b.Outer(), x, torch.tensor(0))
    assert run(compiled, x, bad) == want
    inner, graphs = graphs_of(load(fixed, "pkg.a").Inner(), x)
    assert graphs == 1 and run(inner, x) == run(load(orig, "pkg.a").Inner(), x)  # deferred under its own entry


# -- differential: nested helpers and modules over two files ----------------------------------------

OUTPUTS = {
    "print": 'print("{tag}", x.sum())',
    "warn": 'warnings.warn("{tag}", UserWarning)',
    "log": 'logger.warning("{tag} %s", 1)',
}


@st.composite
def programs(draw):
    """a.py: a module-level helper and a base-class method that print/warn/log (the method may
    call the helper); b.py: the entry, calling the method, with its own ops, an index that may be
    out of range, and maybe a print of its own. Returns the two files and the stacks Dynamo would
    report for every output call of a.py."""
    util_out = draw(st.lists(st.sampled_from(sorted(OUTPUTS)), max_size=2))
    helper_steps = draw(st.lists(st.sampled_from(sorted(OUTPUTS) + ["util", "math"]), min_size=1, max_size=3))
    forward_steps = draw(st.lists(st.sampled_from(["helper", "math", "index", "print"]), min_size=1, max_size=4))
    if "helper" not in forward_steps:
        forward_steps.insert(draw(st.integers(0, len(forward_steps))), "helper")
    a = ["import logging", "import warnings", "", "import torch", "", 'logger = logging.getLogger("gmx")', "", "",
         "def util(x):"]
    sites: list[tuple[str, int]] = []  # (function, line) of each output call in a.py
    for k, kind in enumerate(util_out):
        a.append("    " + OUTPUTS[kind].format(tag=f"util{k}"))
        sites.append(("util", len(a)))
    a += ["    return x + 1", "", "", "class Base(torch.nn.Module):", "    def helper(self, x):"]
    util_calls = []
    for k, kind in enumerate(helper_steps):
        if kind == "util":
            a.append("        x = util(x)")
            util_calls.append(len(a))
        elif kind == "math":
            a.append("        x = x * 2")
        else:
            a.append("        " + OUTPUTS[kind].format(tag=f"helper{k}"))
            sites.append(("helper", len(a)))
    a += ["        return x - 1", ""]
    b = ["import torch", "", "from .a import Base", "", "", "class Model(Base):", "    def forward(self, x, i):"]
    helper_calls = []
    for k, kind in enumerate(forward_steps):
        if kind == "helper":
            b.append("        x = self.helper(x)")
            helper_calls.append(len(b))
        elif kind == "math":
            b.append("        x = x.sin() + 1")
        elif kind == "index":
            b.append("        x = x + x[i]")
        else:
            b.append(f'        print("forward{k}", x.sum())')
    b += ["        return x", ""]
    stacks = []
    for call in helper_calls:
        for function, line in sites:
            if function == "helper":
                stacks.append((line, (Frame("pkg/b.py", call, "forward"), Frame("pkg/a.py", line, "helper"))))
            else:
                stacks += [(line, (Frame("pkg/b.py", call, "forward"), Frame("pkg/a.py", u, "helper"),
                                   Frame("pkg/a.py", line, "util"))) for u in util_calls]
    own = [(n, (Frame("pkg/b.py", n, "forward"),)) for n, text in enumerate(b, 1) if "print(" in text]
    return "\n".join(a), "\n".join(b), {"pkg/a.py": tuple(stacks), "pkg/b.py": tuple(own)}


TWICE_A = '''import logging

import torch

logger = logging.getLogger("gmx")


class Base(torch.nn.Module):
    def helper(self, x):
        logger.warning("helper0 %s", 1)
        return x - 1
'''
TWICE_B = '''import torch

from .a import Base


class Model(Base):
    def forward(self, x, i):
        x = self.helper(x)
        x = x + x[i]
        x = self.helper(x)
        return x
'''
# One entry calls the helper twice, an index that can fail between the calls: the runtime knows the
# entry, not the path, so the failing path declines the entry for both.
TWICE = (TWICE_A, TWICE_B, {"pkg/a.py": tuple((10, (Frame("pkg/b.py", n, "forward"), Frame("pkg/a.py", 10, "helper")))
                                              for n in (8, 10)), "pkg/b.py": ()})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.booleans())
@example(TWICE, True)
def test_outputs_warnings_logs_and_errors_come_out_as_the_original_made_them(case, out_of_range):
    a, b, stacks = case
    with tempfile.TemporaryDirectory() as tmp:
        orig, fixed = _package(Path(tmp), a=a, b=b)
        fix_package(fixed, stacks)
        x, i = torch.arange(3.0), torch.tensor(9 if out_of_range else 1)
        before, after = load(orig, "pkg.b").Model(), load(fixed, "pkg.b").Model()
        assert run(after, x, i) == run(before, x, i), "eager"
        # Each call compiled against the original's same call: Dynamo's own second call may differ
        # from its first (a warning from a resumed frame reported at its function's first line).
        torch._dynamo.reset()
        original = torch.compile(before, backend="eager")
        want, want_again = run(original, x, i), run(original, x, i)
        torch._dynamo.reset()
        compiled = torch.compile(after, backend="eager")
        got = run(compiled, x, i)
        assert got == want, ((fixed / "pkg/a.py").read_text(), (fixed / "pkg/b.py").read_text())
        assert run(compiled, x, i) == want_again, "second call"


def test_fix_file_marks_a_call_that_reached_another_files_output_as_immediate(tmp_path):
    """b.py's print is deferred only if nothing after it prints immediately: here ``self.helper``
    ran into a.py's warning (a break of the run's other file), so under compile that warning would
    come out before b.py's deferred print. fix_file gives the rule that from the run's breaks."""
    from graphmend.fix import fix_file
    from graphmend.model import Category, GraphBreak

    b = B.replace("        y = self.helper(x) + 1\n", '        print("first")\n        y = self.helper(x) + 1\n')
    orig, fixed = _package(tmp_path, b=b)
    printed = GraphBreak(file="pkg/b.py", line=8, reason="print", category=Category.SIDE_EFFECT, rule="GM201",
                         verified=True, stack=(Frame("pkg/b.py", 8, "forward"),))
    warned = GraphBreak(file="pkg/a.py", line=11, reason="warn", category=Category.SIDE_EFFECT, rule="GM203",
                        verified=True, stack=(Frame("pkg/b.py", 9, "forward"), Frame("pkg/a.py", 11, "helper")))
    ctx = RuleContext(file="pkg/b.py", threshold=Safety.SAFE, device="cpu", runtime=locate(fixed, "pkg/b.py"))
    alone = fix_file(fixed, "pkg/b.py", [printed], ctx, RULES, context=[printed])
    assert [f.safety for f in alone.applied] == [Safety.SAFE]
    result = fix_file(fixed, "pkg/b.py", [printed], ctx, RULES, context=[printed, warned])
    assert result.applied == () and "it reached the output at pkg/a.py:11" in result.skipped[0].fix.notes
