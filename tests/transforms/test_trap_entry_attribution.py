"""A lowered check runs lowered only under the entry its fix proved, whatever the runtime is called with.

``lib.py`` holds a module whose ``forward`` checks its input (GM301 lowers it under the entry
``lib.Block``: nothing in that class writes before the check) and a ``torch.compile``'d function
that records the call in module state, then calls the block. The runtime names the outermost
boundary's entry by the class of its first argument when that is a module, so the compiled
function ``run(block, x)`` passes for the clean entry ``lib.Block``: the check is lowered into
``run``'s graph, which fails as a whole, and the ``STATE.append`` made before it is lost, where
the original recorded the call and then raised.

The same happened when the clean class is a boundary that runs eagerly: ``Block``, called
without compile, calls a compiled submodule of another (unrewritten) file that records the call
and then calls ``lib.check``. The submodule's graph is no boundary's region (``Block`` started
none), so the check must stay a Python check there; named ``lib.Block``, it was lowered into that
graph and the record made before it was lost.

The file is fixed at the default safety as ``graphmend fix`` does it; the program must behave
as the original did (values, exception type and message, ``STATE``).
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import run_driver  # noqa: E402

LIB = '''import torch

STATE = []


class Block(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1


@torch.compile(backend="eager")
def run(block, x):
    STATE.append(1)
    return block(x * 2)
'''

DRIVE = textwrap.dedent('''
    import json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import lib
    seen = []
    block = lib.Block()
    for values in ([1.0], [-1.0], [2.0]):
        try:
            got = ["value", lib.run(block, torch.tensor(values)).tolist()]
        except Exception as exc:
            got = ["raise", type(exc).__name__, str(exc)]
        seen.append([got, len(lib.STATE)])
    print(json.dumps(seen))
''')


LIB_EAGER = '''import torch


def check(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x


class Block(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return check(x) + self.inner(x)
'''

DRIVE_EAGER = textwrap.dedent('''
    import json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import lib
    STATE = []

    class Inner(torch.nn.Module):
        def forward(self, x):
            STATE.append(1)
            return lib.check(x - 2)

    seen = []
    block = lib.Block(torch.compile(Inner(), backend="eager"))
    for values in ([3.0], [1.0], [4.0]):
        try:
            got = ["value", block(torch.tensor(values)).tolist()]
        except Exception as exc:
            got = ["raise", type(exc).__name__, str(exc)]
        seen.append([got, len(STATE)])
    print(json.dumps(seen))
''')


def _run(folder, drive=DRIVE):
    return run_driver(drive, str(folder), timeout=300)


@pytest.mark.parametrize("lib,drive", [(LIB, DRIVE), (LIB_EAGER, DRIVE_EAGER)],
                         ids=["compiled-function-called-with-the-module", "compiled-submodule-under-an-eager-boundary"])
def test_a_check_lowered_under_a_clean_class_keeps_the_state_another_entry_writes(tmp_path, lib, drive):
    original, fixed = tmp_path / "original", tmp_path / "fixed"
    original.mkdir()
    fixed.mkdir()
    (original / "lib.py").write_text(lib)
    (fixed / "lib.py").write_text(fix_text("lib.py", lib, RuleContext(file="lib.py", device="cpu")).text)
    want = _run(original, drive)
    assert [w[0][0] for w in want] == ["value", "raise", "value"]
    assert [w[1] for w in want] == [1, 2, 3]
    assert _run(fixed, drive) == want
