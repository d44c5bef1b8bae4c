"""Writes that run before a lowered check (GM301) but that ``_reach`` does not see.

Each program below writes Python-side state (``self.calls``) in the same compiled graph before
a tensor check, through a path the reachability analysis does not follow: a method overridden
by a subclass in another file, a decorator on ``forward``, a property getter, a submodule whose
``__call__`` is overridden, a forward pre-hook on the checking submodule. The fix at the default
safety must either leave the check alone (decline) or keep the program's behaviour: the same
values, the same exception (type and message) and the same module state after each call,
compiled (backend eager: a graph that raises loses the writes Dynamo applies when it returns)
as in the original.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

torch = pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402

CHECK = "        if (x < 0).any():\n            raise ValueError(\"negative input\")\n        return x + 1\n"

# A method the check's forward calls first; a subclass in another file (below) overrides it.
OVERRIDDEN = (
    "import torch\n\n\nclass Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.calls = 0\n\n    def prepare(self, x):\n        return x * 2\n\n"
    "    def forward(self, x):\n        x = self.prepare(x)\n" + CHECK
)

# A decorator of this file on forward that counts the calls before running it.
DECORATED = (
    "import torch\n\n\ndef counted(fn):\n    def wrapper(self, x):\n        self.calls += 1\n"
    "        return fn(self, x)\n    return wrapper\n\n\n"
    "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n"
    "    @counted\n    def forward(self, x):\n" + CHECK
)

# A property read before the check whose getter writes state.
PROPERTY = (
    "import torch\n\n\nclass Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.calls = 0\n\n    @property\n    def scale(self):\n        self.calls += 1\n        return 2.0\n\n"
    "    def forward(self, x):\n        x = x * self.scale\n" + CHECK
)

# A submodule of this file whose __call__ (not its forward) writes state.
CALL_OVERRIDE = (
    "import torch\n\n\nclass Scale(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.calls = 0\n\n    def __call__(self, x):\n        self.calls += 1\n        return super().__call__(x)\n\n"
    "    def forward(self, x):\n        return x * 2\n\n\n"
    "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scale = Scale()\n\n"
    "    def forward(self, x):\n        x = self.scale(x)\n" + CHECK
)

# A forward pre-hook on the checking submodule that counts its calls (hooks run inside the graph).
HOOKED = (
    "import torch\n\n\nclass Inner(torch.nn.Module):\n    def forward(self, x):\n" + CHECK + "\n\n"
    "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n"
    "        self.inner = Inner()\n        self.inner.register_forward_pre_hook(self._count)\n\n"
    "    def _count(self, module, args):\n        self.calls += 1\n\n"
    "    def forward(self, x):\n        return self.inner(x * 2)\n"
)


def _counting_subclass(module):
    # What a user of the library writes in their own file: the library cannot see it.
    class Counting(module.Block):
        def prepare(self, x):
            self.calls += 1
            return x * 2

    return Counting()


CASES = {
    "overridden-in-another-file": (OVERRIDDEN, _counting_subclass),
    "decorator-on-forward": (DECORATED, lambda m: m.Block()),
    "property-getter": (PROPERTY, lambda m: m.Block()),
    "submodule-call-override": (CALL_OVERRIDE, lambda m: m.Block()),
    "forward-pre-hook": (HOOKED, lambda m: m.Block()),
}

_names = itertools.count()


def _load(path, text):
    path.write_text(text)
    name = f"trap_reach_prog_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _state(module):
    return {f"{n}.{k}": v for n, sub in module.named_modules() for k, v in vars(sub).items() if k == "calls"}


def _run(module, make):
    torch._dynamo.reset()
    model = make(module)
    compiled = torch.compile(model, backend="eager")
    seen = []
    for values in ([1.0, 2.0], [-1.0, 2.0], [3.0, 2.0]):
        try:
            got = ["value", compiled(torch.tensor(values)).tolist()]
        except Exception as exc:  # noqa: BLE001 - the exception is what is compared
            got = ["raise", type(exc).__name__, str(exc)]
        seen.append((got, _state(model)))
    return seen


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_written_before_a_lowered_check_is_kept(tmp_path, name):
    text, make = CASES[name]
    result = fix_text("prog.py", text, RuleContext(file="prog.py", device="cpu"))
    original = _run(_load(tmp_path / "original.py", text), make)
    assert [o[0][0] for o in original] == ["value", "raise", "value"]
    fixed = _run(_load(tmp_path / "fixed.py", result.text), make)
    assert fixed == original, (name, [f.rule for f in result.applied])
