"""The entry a lowered check or a deferred call is judged under is the compiled region that runs it.

``lib.py`` (rewritten at the default safety, as ``graphmend fix`` does it) holds a module-level
``check`` whose ``raise`` GM301 lowers under the classes of the file that reach it without
writing first, modules that call it, and a module whose own ``forward`` breaks the graph after
its check; ``show.py`` holds modules that print (GM201 defers the prints). The driver, another
(unrewritten) file, nests them in every shape the runtime must tell apart, eager and compiled
(backend eager):

* a compiled module of the driver called beneath a ``lib`` module that runs eagerly: its graph
  is no boundary's region, so the check stays a Python check (a lowered one would fail the graph
  and lose the state it wrote first) and the print runs where it is (a record would wait for the
  eager boundary and come out after the output that followed it);
* compiled inside compiled (the inner module is inlined: one region, lowered, no graph break);
* a ``lib`` module whose ``forward`` is entered after a graph break of a compiled ``lib`` module
  that writes state first: the break's frame is a region of its own, with its own entry;
* recursion (a chain of ``lib`` modules with a compiled driver module at its end), a generator
  expression over compiled submodules, an exception that unwinds a boundary before another
  compiled call, a compiled call in a second thread while a boundary runs (or waits with its
  records pending) in the first, and the documented wrapper of an outside compile site
  (``lib._graphmend_boundary(torch.compile(m))``) around a ``lib`` module (the module's own
  boundary starts the region: the check is lowered).

Every shape must behave as the original does: values, exception type and message, the state
the driver's modules write, and the printed text, call by call.
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import run_driver  # noqa: E402

LIB = '''import torch


def check(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x


class Block(torch.nn.Module):
    def __init__(self, inner=None):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        y = check(x) + 1
        if self.inner is not None:
            y = y + self.inner(x)
        return y


class Chain(torch.nn.Module):
    def __init__(self, depth, leaf):
        super().__init__()
        self.next = Chain(depth - 1, leaf) if depth else leaf

    def forward(self, x):
        return check(x) + self.next(x - 1)


class Fan(torch.nn.Module):
    def __init__(self, parts):
        super().__init__()
        self.parts = torch.nn.ModuleList(parts)

    def forward(self, x):
        y = check(x)
        return y + sum(part(x) for part in self.parts)


class Sub(torch.nn.Module):
    def forward(self, x):
        y = check(x) * 2
        torch._dynamo.graph_break()
        return y


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.sub = Sub()

    def forward(self, x):
        self.calls += 1
        return self.sub(x) + 1
'''

# Printing modules (GM201 defers their prints; a file that also lowers a check would not: a graph
# that raises loses its records).
SHOW = '''import torch


class Printer(torch.nn.Module):
    def forward(self, x):
        print("printer", x.sum())
        return x * 3


class Shell(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        y = self.inner(x)
        print("shell", y.sum())
        return y + 1


class Paused(torch.nn.Module):
    def __init__(self, pause):
        super().__init__()
        self.pause = pause

    def forward(self, x):
        print("paused", x.sum())
        return self.pause(x) + 1
'''

DRIVE = textwrap.dedent('''
    import contextlib, io, json, sys, threading
    import torch
    import torch._dynamo
    sys.path.insert(0, sys.argv[1])
    import lib
    import show

    STATE = []


    def compiled(module):
        return torch.compile(module, backend="eager")


    class Record(torch.nn.Module):
        """Writes state, then checks through lib (a compiled region of this file)."""
        def forward(self, x):
            STATE.append(1)
            return lib.check(x - 2)


    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) - 1


    def observe(call, inputs):
        seen = []
        for values in inputs:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    got = ["value", call(torch.tensor(values)).tolist()]
                except Exception as exc:
                    got = ["raise", type(exc).__name__, str(exc)]
            seen.append([got, len(STATE), out.getvalue()])
        return seen


    def in_two_threads():
        # While a compiled lib.Block runs (its boundary names the clean entry lib.Block) and waits
        # in a graph break, a second thread runs a compiled module of this file.
        entered, done = threading.Event(), threading.Event()

        @torch.compiler.disable
        def pause(x):
            entered.set()
            done.wait(60)
            return x

        block = compiled(lib.Block(pause))
        first = threading.Thread(target=lambda: block(torch.tensor([1.0])))
        first.start()
        entered.wait(60)
        try:
            return observe(compiled(Record()), ([3.0], [1.0], [4.0]))
        finally:
            done.set()
            first.join()


    def records_in_two_threads():
        # A compiled show.Paused has recorded its print and waits in a graph break (its boundary
        # replays the record when the call returns) while a second thread runs a compiled
        # show.Printer: each thread's output is its own, printed in that thread.
        entered, done, local = threading.Event(), threading.Event(), threading.local()

        class PerThread(io.TextIOBase):
            def write(self, text):
                local.__dict__.setdefault("out", []).append(text)
                return len(text)

        @torch.compiler.disable
        def pause(x):
            entered.set()
            done.wait(60)
            return x

        def call(module, values):
            local.out = []
            try:
                got = ["value", module(torch.tensor(values)).tolist()]
            except Exception as exc:
                got = ["raise", type(exc).__name__, str(exc)]
            return [got, len(STATE), "".join(local.out)]

        seen, stdout = {}, sys.stdout
        sys.stdout = PerThread()
        try:
            first = threading.Thread(target=lambda: seen.update(first=call(compiled(show.Paused(pause)), [1.0])))
            first.start()
            entered.wait(60)
            try:
                seen["second"] = call(compiled(show.Printer()), [2.0])
            finally:
                done.set()
                first.join()
        finally:
            sys.stdout = stdout
        return [seen["second"], seen["first"]]


    def after_an_exception():
        seen = observe(compiled(lib.Block()), ([-1.0],))
        return seen + observe(compiled(Record()), ([3.0], [1.0]))


    INPUTS = ([3.0], [1.0], [4.0])
    SHAPES = {
        "compiled-under-eager": lambda: observe(lib.Block(compiled(Record())), INPUTS),
        "compiled-under-eager-prints": lambda: observe(show.Shell(compiled(Wrap(show.Printer()))), INPUTS),
        "compiled-inside-compiled": lambda: observe(compiled(lib.Block(compiled(lib.Block()))), ([1.0], [-1.0], [2.0])),
        "boundary-after-a-graph-break": lambda: observe(compiled(lib.Outer()), ([1.0], [-1.0], [2.0])),
        "recursion-eager": lambda: observe(lib.Chain(2, compiled(Record())), ([5.0], [3.0], [6.0])),
        "recursion-compiled": lambda: observe(compiled(lib.Chain(2, lib.Block())), ([3.0], [1.0], [4.0])),
        "generator-eager": lambda: observe(lib.Fan([compiled(Record()), compiled(Record())]), INPUTS),
        "generator-compiled": lambda: observe(compiled(lib.Fan([lib.Block(), lib.Block()])), ([1.0], [-1.0], [2.0])),
        "after-an-exception": after_an_exception,
        "second-thread": in_two_threads,
        "second-thread-prints": records_in_two_threads,
        "compiled-with-a-submodule-of-another-file": lambda: observe(compiled(lib.Block(Record())), INPUTS),
        # The documented wrapper of a compile site outside the file, around a module of the file:
        # the region is the module's own (its boundary starts it), so its proof holds.
        "wrapped-compile-site": lambda: observe(getattr(lib, "_graphmend_boundary", lambda f: f)(compiled(lib.Block())),
                                                ([1.0], [-1.0], [2.0])),
    }

    result = {}
    for name in sys.argv[2].split(","):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        del STATE[:]
        seen = SHAPES[name]()
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
        result[name] = {"seen": seen, "breaks": breaks}
    print(json.dumps(result))
''')

SHAPES = ("compiled-under-eager", "compiled-under-eager-prints", "compiled-inside-compiled", "boundary-after-a-graph-break",
          "recursion-eager", "recursion-compiled", "generator-eager", "generator-compiled", "after-an-exception",
          "second-thread", "second-thread-prints", "wrapped-compile-site")
# Compiled ``lib.Block`` inlines a submodule of the driver that writes state and then calls
# ``lib.check``: code the fix cannot read, calling back. The proof cannot see what ``self.inner``
# holds; the runtime does (a module of another file under the entry keeps the check in Python).
UNSEEN = "compiled-with-a-submodule-of-another-file"

# Shapes whose check runs in a region a proven lib entry starts: the fixed program lowers it
# (the original breaks the graph at it; the fixed one does not, or less often).
LOWERED = ("compiled-inside-compiled", "boundary-after-a-graph-break", "recursion-compiled", "generator-compiled",
           "wrapped-compile-site")


def _run(folder):
    shapes = ",".join(SHAPES + (UNSEEN,))
    return run_driver(DRIVE, str(folder), shapes, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("nesting")
    original, fixed = root / "original", root / "fixed"
    original.mkdir()
    fixed.mkdir()
    texts = {}
    for name, text in (("lib.py", LIB), ("show.py", SHOW)):
        (original / name).write_text(text)
        texts[name] = fix_text(name, text, RuleContext(file=name, device="cpu")).text
        (fixed / name).write_text(texts[name])
    return _run(original), _run(fixed), texts


def test_the_fix_lowers_the_check_and_defers_the_print(runs):
    texts = runs[2]
    assert "_graphmend_trap((x < 0).any(), ValueError, 'negative input', entries=(" in texts["lib.py"]
    # Paused's print of a tensor comes before `self.pause(x)`, a call that may fail while Dynamo
    # traces it: a call given a tensor cannot be made from a failed trace, so it is left as written.
    assert texts["show.py"].count("_graphmend_deferred(print") == 2
    assert '        print("paused", x.sum())\n' in texts["show.py"]


@pytest.mark.parametrize("shape", SHAPES)
def test_each_nesting_behaves_as_the_original(runs, shape):
    original, fixed, _ = runs
    assert fixed[shape]["seen"] == original[shape]["seen"]
    assert any(step[0][0] == "raise" or step[2] for step in original[shape]["seen"]), "the shape fails or prints"


@pytest.mark.parametrize("shape", LOWERED)
def test_a_check_in_a_region_a_proven_entry_starts_is_lowered(runs, shape):
    original, fixed, _ = runs
    assert fixed[shape]["breaks"] < original[shape]["breaks"]


def test_a_submodule_of_another_file_that_calls_back_keeps_its_state(runs):
    original, fixed, _ = runs
    assert fixed[UNSEEN]["seen"] == original[UNSEEN]["seen"]
