"""A property read the analysis does not see as one writes state before a check all the same.

``Block.scale`` is a property that counts its reads; ``forward`` reads it, then checks its input:
read with ``getattr(self, "scale")``, made with ``scale = property(_scale)`` rather than the
decorator, or inherited from a base class in another file. GM301 lowers the check under
``lib.Block`` as if nothing wrote before it; compiled, the graph fails as a whole and the count
made before the check is lost, where the original counted and then raised. The file is fixed at
the default safety as ``graphmend fix`` does it; the program must behave as the original did.
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
    def __init__(self):
        super().__init__()
        self.reads = 0

    @property
    def scale(self):
        self.reads += 1
        return 2.0

    def forward(self, x):
        x = x * getattr(self, "scale")
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1
'''

LIB_PROPERTY_CALL = '''import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.reads = 0

    def _scale(self):
        self.reads += 1
        return 2.0

    scale = property(_scale)

    def forward(self, x):
        x = x * self.scale
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1
'''

BASE = '''import torch


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.reads = 0

    @property
    def scale(self):
        self.reads += 1
        return 2.0
'''

LIB_INHERITED = '''import torch

from base import Base


class Block(Base):
    def forward(self, x):
        x = x * self.scale
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1
'''

DRIVE = textwrap.dedent('''
    import json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import lib
    seen = []
    model = lib.Block()
    compiled = torch.compile(model, backend="eager")
    for values in ([1.0], [-1.0], [2.0]):
        try:
            got = ["value", compiled(torch.tensor(values)).tolist()]
        except Exception as exc:
            got = ["raise", type(exc).__name__, str(exc)]
        seen.append([got, model.reads])
    print(json.dumps(seen))
''')


def _run(folder):
    return run_driver(DRIVE, str(folder), timeout=300)


@pytest.mark.parametrize("files", [{"lib.py": LIB}, {"lib.py": LIB_PROPERTY_CALL},
                                   {"lib.py": LIB_INHERITED, "base.py": BASE}],
                         ids=["getattr-with-a-string", "property-called", "inherited-from-another-file"])
def test_a_property_read_before_a_check_keeps_its_write(tmp_path, files):
    original, fixed = tmp_path / "original", tmp_path / "fixed"
    original.mkdir()
    fixed.mkdir()
    for name, text in files.items():
        (original / name).write_text(text)
        (fixed / name).write_text(fix_text(name, text, RuleContext(file=name, device="cpu")).text)
    want = _run(original)
    assert want == [[["value", [3.0]], 1], [["raise", "ValueError", "negative input"], 2], [["value", [5.0]], 3]]
    assert _run(fixed) == want
