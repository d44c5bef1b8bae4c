"""GM301 and an in-place update of a view made by a torch function the alias list does not name.

``_reach._fresh_value`` counts every ``torch.f(...)`` not in ``ALIAS_FUNCS`` as a new tensor, so
``h = torch.ravel(x); h += 1`` "updates nothing it was given" and the check after it is lowered.
``torch.ravel`` of a contiguous tensor is a view: the original wrote the caller's ``x`` before
raising; compiled with aot_eager (input mutations are applied when the graph returns) the fixed
program raises with ``x`` unwritten. Unknown functions must count as possible aliases.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

torch = pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402

PROGRAM = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        h = torch.ravel(x)
        h += 1
        if (h < 0).any():
            raise ValueError("negative input")
        return h * 2
'''

_names = itertools.count()


def _load(path, text):
    path.write_text(text)
    name = f"reach_fresh_prog_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _run(module):
    torch._dynamo.reset()
    compiled = torch.compile(module.M(), backend="aot_eager")
    seen = []
    for values in ([1.0, 2.0], [-3.0, 2.0]):
        x = torch.tensor(values)
        try:
            got = ["value", compiled(x).tolist()]
        except Exception as exc:  # noqa: BLE001 - the exception is what is compared
            got = ["raise", type(exc).__name__, str(exc)]
        seen.append((got, x.tolist()))
    return seen


def test_an_input_written_through_an_unlisted_view_is_kept(tmp_path):
    result = fix_text("prog.py", PROGRAM, RuleContext(file="prog.py", device="cpu"))
    want = _run(_load(tmp_path / "original.py", PROGRAM))
    assert want[1] == (["raise", "ValueError", "negative input"], [-2.0, 3.0])
    assert _run(_load(tmp_path / "fixed.py", result.text)) == want, [f.rule for f in result.applied]
