"""A check lowered in one rewritten file runs under a boundary of another rewritten file.

``lib.py`` holds a module whose ``forward`` checks its input (GM301 lowers it: nothing in that
file writes before it). ``app.py``, another file of the same repository, holds the model that
uses it: its ``forward`` counts the call and prints before calling the block (GM201 defers the
print: ``app.Outer`` becomes a boundary). Compiled, both files' code is one graph under the
``Outer`` boundary, so the lowered check fails the whole graph: the count and the deferred
print made before it are lost, where the original printed and counted before raising.

Each file is fixed at the default safety as ``graphmend fix`` does it; the program must behave
as the original did (values, exception type and message, ``calls``, printed text). When the
model catches the block's ValueError itself, the lowered check escapes its handler: the caller
gets ValueError where the original returned zeros.
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import run_driver  # noqa: E402

LIB = '''import torch


class Block(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1
'''

APP = '''import torch

from lib import Block


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.inner = Block()

    def forward(self, x):
        self.calls += 1
        print("outer")
        return self.inner(x * 2)
'''

# The model catches the block's error: under compile its handler never sees it (the graph fails
# as a whole, outside the traced `try`), and the boundary raises ValueError to the caller.
APP_CATCHES = '''import torch

from lib import Block


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Block()

    def forward(self, x):
        print("outer")
        try:
            return self.inner(x * 2)
        except ValueError:
            return torch.zeros_like(x)
'''

# A check in a module-level helper is lowered only under the entries named in `entries=(...)`:
# bare class names, so a class of the same name in another rewritten file (whose forward counts
# and prints first) passes for the clean entry `lib.Outer`.
LIB_HELPER = '''import torch


def check(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x


class Outer(torch.nn.Module):
    def forward(self, x):
        return check(x) + 1
'''

APP_SAME_NAME = '''import torch

from lib import check


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        print("outer")
        return check(x * 2) + 1
'''

DRIVE = textwrap.dedent('''
    import contextlib, io, json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import app
    seen = []
    for backend in (None, "eager"):
        torch._dynamo.reset()
        model = app.Outer()
        call = model if backend is None else torch.compile(model, backend=backend)
        for values in ([1.0, 2.0], [-1.0, 2.0], [3.0, 2.0]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    got = ["value", call(torch.tensor(values)).tolist()]
                except Exception as exc:
                    got = ["raise", type(exc).__name__, str(exc)]
            seen.append([backend, got, getattr(model, 'calls', None), out.getvalue()])
    print(json.dumps(seen))
''')


def _run(folder):
    return run_driver(DRIVE, str(folder), timeout=300)


@pytest.mark.parametrize("lib,app,outcomes", [
    (LIB, APP, ["value", "raise", "value"]),
    (LIB, APP_CATCHES, ["value"] * 3),
    (LIB_HELPER, APP_SAME_NAME, ["value", "raise", "value"]),
], ids=["writes-and-prints", "catches", "helper-entry-of-the-same-name"])
def test_check_lowered_in_one_file_keeps_another_files_behaviour(tmp_path, lib, app, outcomes):
    original, fixed = tmp_path / "original", tmp_path / "fixed"
    original.mkdir()
    fixed.mkdir()
    for name, text in (("lib.py", lib), ("app.py", app)):
        (original / name).write_text(text)
        (fixed / name).write_text(fix_text(name, text, RuleContext(file=name, device="cpu")).text)
    want = _run(original)
    assert [w[1][0] for w in want] == outcomes * 2
    assert _run(fixed) == want
