"""A lowered check reached through code of another file that calls back into the rewritten file.

``lib.py`` and ``fnlib.py`` (rewritten at the default safety, as ``graphmend fix`` does it) each
hold a module-level ``check`` whose ``raise`` GM301 lowers, and modules that call ``check`` first
and then hand the value to code the fix cannot read. The driver (another, unrewritten file)
supplies that code: it writes state (``STATE.append``) and then calls ``check`` again. Compiled,
all of it is one graph under the rewritten module's entry; a lowered check that fails there fails
the graph, and the write Dynamo would apply when the graph returns is lost, where the original
kept it. The ways in:

* a submodule of another file built by ``lib`` itself (``self.post = helper.Post()``);
* a ``functools.partial`` stored on ``self`` by ``lib`` (around a function the driver passes in);
* a function handed to ``fnlib.Apply.forward`` as an argument (``fn(y)``);
* a lambda of ``fnlib`` stored on ``self`` that calls a function the driver passes in.

Each must behave as the original does — value, exception type and message, the state written,
the printed text (none: a print in the callback would split the graph) — eagerly and compiled
(backends eager and aot_eager), call by call; and a module of ``lib`` whose callees are all
``lib``'s own still has its check lowered (fewer graph breaks).
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import run_driver  # noqa: E402

LIB = '''import functools

import torch

import helper


def check(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x


class Owned(torch.nn.Module):
    """Builds a submodule of another file (helper.Post), which calls back into check."""

    def __init__(self):
        super().__init__()
        self.post = helper.Post()

    def forward(self, x):
        y = check(x) + 1
        return self.post(y)


class Partial(torch.nn.Module):
    def __init__(self, post):
        super().__init__()
        self.post = functools.partial(post, scale=2.0)

    def forward(self, x):
        y = check(x) + 1
        return self.post(y)


class Scale(torch.nn.Module):
    def forward(self, x):
        return check(x - 1) * 3


class Own(torch.nn.Module):
    """Control: everything it calls is lib's own (or torch's)."""

    def __init__(self):
        super().__init__()
        self.scale = Scale()
        self.norm = torch.nn.LayerNorm(1)

    def forward(self, x):
        y = check(x) + 1
        return self.norm(self.scale(y))
'''

FNLIB = '''import torch


def check(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x


class Apply(torch.nn.Module):
    def forward(self, x, fn):
        y = check(x) + 1
        return fn(y)


class Lambda(torch.nn.Module):
    def __init__(self, post):
        super().__init__()
        self.post = lambda y: post(y) * 2

    def forward(self, x):
        y = check(x) + 1
        return self.post(y)
'''

HELPER = '''import torch

STATE = []
CHECK = None  # lib.check, set by the driver (lib imports this file)


class Post(torch.nn.Module):
    def forward(self, y):
        STATE.append(1)
        return CHECK(y - 3) * 5
'''

DRIVE = textwrap.dedent('''
    import contextlib, io, json, sys
    import torch
    import torch._dynamo
    sys.path.insert(0, sys.argv[1])
    import fnlib
    import helper
    import lib

    STATE = helper.STATE
    helper.CHECK = lib.check


    def post(y, scale=1.0):
        STATE.append(1)
        return lib.check(y - 3) * scale


    def fnpost(y):
        STATE.append(1)
        return fnlib.check(y - 3)


    SHAPES = {
        "submodule-of-another-file": lambda: (lib.Owned(), ()),
        "function-argument": lambda: (fnlib.Apply(), (fnpost,)),
        "partial-on-self": lambda: (lib.Partial(post), ()),
        "lambda-on-self": lambda: (fnlib.Lambda(fnpost), ()),
        "own-code": lambda: (lib.Own(), ()),
    }
    # passes both checks; fails the callback's (after its write); fails the first check
    INPUTS = ([4.0], [1.0], [-1.0], [5.0])

    result = {}
    for name in sys.argv[2].split(","):
        for mode in ("eager", "compiled-eager", "compiled-aot_eager"):
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            del STATE[:]
            module, extra = SHAPES[name]()
            call = module if mode == "eager" else torch.compile(module, backend=mode.split("-", 1)[1])
            seen = []
            for values in INPUTS:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    try:
                        got = ["value", call(torch.tensor(values), *extra).tolist()]
                    except Exception as exc:
                        got = ["raise", type(exc).__name__, str(exc)]
                seen.append([got, len(STATE), out.getvalue()])
            breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
            result[name + "/" + mode] = {"seen": seen, "breaks": breaks}
    print(json.dumps(result))
''')

CALLBACKS = ("submodule-of-another-file", "function-argument", "partial-on-self", "lambda-on-self")
SHAPES = CALLBACKS + ("own-code",)
MODES = ("eager", "compiled-eager", "compiled-aot_eager")


def _run(folder):
    return run_driver(DRIVE, str(folder), ",".join(SHAPES), timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("callback")
    original, fixed = root / "original", root / "fixed"
    original.mkdir()
    fixed.mkdir()
    for folder in (original, fixed):
        (folder / "helper.py").write_text(HELPER)
    texts = {}
    for name, text in (("lib.py", LIB), ("fnlib.py", FNLIB)):
        (original / name).write_text(text)
        texts[name] = fix_text(name, text, RuleContext(file=name, device="cpu")).text
        (fixed / name).write_text(texts[name])
    return _run(original), _run(fixed), texts


def _trap_line(text):
    return next(line for line in text.splitlines() if "_graphmend_trap((x < 0).any()" in line)


def test_a_held_callable_is_left_to_the_runtime_and_unread_code_declines_the_entry(runs):
    texts = runs[2]
    # lib: what ``self.post`` holds is looked at by the runtime on every call of the outermost
    # boundary, so its entries stay (guarded); the partial and helper.Post keep the check in Python.
    line = _trap_line(texts["lib.py"])
    for entry in ("Owned", "Partial", "Scale", "Own"):
        assert f"'.{entry}'" in line, (entry, line)
    # fnlib: ``fn(y)`` and the lambda's ``post(y)`` call code no one can read, and a lambda of the file
    # may be held by any of its modules: no entry of the file is proven, and the check stays as written.
    assert "_graphmend_trap((x < 0)" not in texts["fnlib.py"]
    assert 'if (x < 0).any():\n        raise ValueError("negative input")' in texts["fnlib.py"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_each_callback_behaves_as_the_original(runs, shape, mode):
    original, fixed, _ = runs
    key = f"{shape}/{mode}"
    assert fixed[key]["seen"] == original[key]["seen"]
    assert any(step[0][0] == "raise" for step in original[key]["seen"]), "the shape fails"


@pytest.mark.parametrize("mode", ("compiled-eager", "compiled-aot_eager"))
@pytest.mark.parametrize("shape", CALLBACKS)
def test_the_callback_writes_before_the_check_that_fails(runs, shape, mode):
    # the input [1.0]: the first check passes, the callback writes and then its check fails
    original, _, _ = runs
    got, state, _ = original[f"{shape}/{mode}"]["seen"][1]
    assert got[0] == "raise" and state == 2


@pytest.mark.parametrize("mode", ("compiled-eager", "compiled-aot_eager"))
def test_a_module_whose_code_is_all_its_files_keeps_the_lowered_check(runs, mode):
    original, fixed, _ = runs
    assert fixed[f"own-code/{mode}"]["breaks"] < original[f"own-code/{mode}"]["breaks"]
