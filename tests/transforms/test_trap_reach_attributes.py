"""Attribute reads and module hooks that run code before a lowered check (GM301), differential.

Each program writes Python-side state (a counter) in the same compiled graph before a tensor
check, through code no call shows: a getter run by ``hasattr``, by a descriptor object in a
class body, by ``getattr`` with a name computed at run time, by a submodule whose base class
is in another file; or a forward hook registered by the code that uses the module (another
file: the fix cannot see it). The file is fixed at the default safety as ``graphmend fix`` does
it; original and fixed must give the same values, exceptions and state, eager and compiled
(backends eager and aot_eager: a graph that raises loses the writes Dynamo applies when it
returns). The VALID programs (a plain attribute under a base of another file, a property that
writes nothing, nn.Module's own ``training``, no hook) are still lowered: one graph, no break.
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
HEAD = "import torch\n\n\nclass Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n"

# hasattr runs the getter (it is a getattr that catches AttributeError). (Compiled, Dynamo itself
# fails on this one, "Guard failed on the same frame": judged statically below.)
HASATTR = HEAD + (
    "    @property\n    def scale(self):\n        self.calls += 1\n        return 2.0\n\n"
    "    def forward(self, x):\n        if hasattr(self, \"scale\"):\n            x = x * 2\n" + CHECK)

# A descriptor object of this file in the class body: reading it runs __get__.
DESCRIPTOR = (
    "import torch\n\n\nclass Counted:\n    def __get__(self, obj, owner=None):\n        obj.calls += 1\n        return 2.0\n\n\n"
    "class Block(torch.nn.Module):\n    scale = Counted()\n\n    def __init__(self):\n        super().__init__()\n"
    "        self.calls = 0\n\n    def forward(self, x):\n        x = x * self.scale\n" + CHECK)

# getattr with a name computed at run time reaches a counting property.
DYNAMIC = HEAD.replace("        self.calls = 0\n", "        self.calls = 0\n        self.which = \"scale\"\n") + (
    "    @property\n    def scale(self):\n        self.calls += 1\n        return 2.0\n\n"
    "    def forward(self, x):\n        x = x * getattr(self, self.which)\n" + CHECK)

BASE = ("import torch\n\n\nclass Base(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.calls = 0\n\n    @property\n    def scale(self):\n        self.calls += 1\n        return 2.0\n")

# A submodule of this file whose base (another file) defines a counting property.
SUBMODULE = (
    "import torch\n\nfrom {base} import Base\n\n\nclass Scale(Base):\n    def forward(self, x):\n        return x\n\n\n"
    "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n"
    "        self.inner = Scale()\n\n    def forward(self, x):\n        x = x * self.inner.scale\n" + CHECK)

# A checking submodule after an ordinary one: hooks on either run inside the graph.
HOOKABLE = (
    "import torch\n\n\nclass Check(torch.nn.Module):\n    def forward(self, x):\n" + CHECK + "\n\n"
    "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n"
    "        self.scale = torch.nn.Identity()\n        self.check = Check()\n\n"
    "    def forward(self, x):\n        return self.check(self.scale(x) * 2)\n")

# VALID: a plain attribute of this file under a base of another file; a property that writes
# nothing; nn.Module's own flag.
PLAIN_UNDER_FOREIGN = (
    "import torch\n\nfrom {base} import Base\n\n\nclass Block(Base):\n    def __init__(self):\n        super().__init__()\n"
    "        self.factor = 2.0\n\n    def forward(self, x):\n        x = x * self.factor\n" + CHECK)
PURE_PROPERTY = HEAD + (
    "    @property\n    def scale(self):\n        return 2.0\n\n"
    "    def forward(self, x):\n        x = x * self.scale\n" + CHECK)
TRAINING = HEAD + "    def forward(self, x):\n        if self.training:\n            x = x * 2\n" + CHECK


def _count_hook(model):
    def hook(module, args):
        model.calls += 1
    return hook


def _pre_hook_on_check(model):
    return [model.check.register_forward_pre_hook(_count_hook(model))]


def _post_hook_on_scale(model):
    def hook(module, args, out):
        model.calls += 1
    return [model.scale.register_forward_hook(hook)]


def _global_pre_hook(model):
    hook = _count_hook(model)
    return [torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: hook(m, a) if m is model.check else None)]


INVALID = {
    "descriptor-object": (DESCRIPTOR, None),
    "getattr-computed-name": (DYNAMIC, None),
    "submodule-base-in-another-file": (SUBMODULE, None),
    "forward-pre-hook-from-another-file": (HOOKABLE, _pre_hook_on_check),
    "forward-hook-from-another-file": (HOOKABLE, _post_hook_on_scale),
    "global-forward-pre-hook": (HOOKABLE, _global_pre_hook),
}
VALID = {
    "plain-attribute-under-a-base-of-another-file": PLAIN_UNDER_FOREIGN,
    "property-that-writes-nothing": PURE_PROPERTY,
    "nn-module-training": TRAINING,
    "no-hook": HOOKABLE,
}

_names = itertools.count()


def _load(folder, text):
    """Import ``text`` as a fresh module; ``{base}`` names a fresh copy of BASE beside it."""
    base = f"trap_attr_base_{next(_names)}"
    (folder / f"{base}.py").write_text(BASE)
    name = f"trap_attr_prog_{next(_names)}"
    path = folder / f"{name}.py"
    path.write_text(text.replace("{base}", base))
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def _fixed(text):
    shown = text.replace("{base}", "base_module")
    result = fix_text("prog.py", shown, RuleContext(file="prog.py", device="cpu"))
    return result.text.replace("base_module", "{base}"), result


def _run(module, backend, hooks=None, late_hooks=None):
    """Four calls (valid, failing, failing, valid): value or exception, and the counters (every
    module's ``calls``), after each; and the number of graphs compiled."""
    torch._dynamo.reset()
    model = module.Block()
    handles = hooks(model) if hooks else []
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    call = model if backend is None else torch.compile(model, backend=counting if backend == "count" else backend)
    seen = []
    try:
        for i, values in enumerate(([1.0, 2.0], [-1.0, 2.0], [3.0, -2.0], [4.0, 1.0])):
            if late_hooks and i == 2:
                handles += late_hooks(model)
            try:
                got = ["value", call(torch.tensor(values)).tolist()]
            except Exception as exc:  # noqa: BLE001 - the exception is what is compared
                got = ["raise", type(exc).__name__, str(exc)]
            seen.append((got, sum(m.calls for m in model.modules() if isinstance(getattr(m, "calls", None), int))))
    finally:
        for h in handles:
            h.remove()
    return seen, len(graphs)


@pytest.mark.parametrize("name", sorted(INVALID))
def test_code_run_by_a_read_or_a_hook_keeps_its_write(tmp_path, name):
    text, hooks = INVALID[name]
    fixed, _ = _fixed(text)
    original, rewritten = _load(tmp_path, text), _load(tmp_path, fixed)
    want = _run(original, None, hooks)[0]
    assert [w[0][0] for w in want] == ["value", "raise", "raise", "value"]
    assert want[-1][1] > 0, "the program must write state before its check"
    for backend in (None, "eager", "aot_eager"):
        assert _run(original, backend, hooks)[0] == want, ("original", backend)
        assert _run(rewritten, backend, hooks)[0] == want, (name, backend)


def test_a_hook_registered_after_the_first_compiled_call_is_seen(tmp_path):
    """The check was lowered on the first calls (no hook); a hook added later must not be
    lost: the runtime looks again on every call, and the graph is not reused."""
    fixed, result = _fixed(HOOKABLE)
    assert "entries=" in fixed, [d.reason for d in result.declined]
    original, rewritten = _load(tmp_path, HOOKABLE), _load(tmp_path, fixed)
    want = _run(original, None, late_hooks=_pre_hook_on_check)[0]
    assert want[-1][1] == 2  # the hook ran on the last two calls
    for backend in ("eager", "aot_eager"):
        assert _run(rewritten, backend, late_hooks=_pre_hook_on_check)[0] == want, backend


@pytest.mark.parametrize("name", sorted(VALID))
def test_plain_reads_are_still_lowered(tmp_path, name):
    text = VALID[name]
    fixed, result = _fixed(text)
    assert [f.rule for f in result.applied] == ["GM301"], [d.reason for d in result.declined]
    assert "entries=" in fixed
    original, rewritten = _load(tmp_path, text), _load(tmp_path, fixed)
    want, _ = _run(original, None)
    for backend in (None, "eager", "aot_eager"):
        assert _run(rewritten, backend)[0] == want, backend
    _, before = _run(original, "count")
    _, after = _run(rewritten, "count")
    assert before > 1 and after == 1, (before, after)  # the check no longer breaks the graph


CACHED = HEAD.replace("import torch\n", "import functools\n\nimport torch\n") + (
    "    @functools.cached_property\n    def scale(self):\n        return 2.0\n\n"
    "    def forward(self, x):\n        x = x * self.scale\n" + CHECK)
ATTRGETTER = HEAD.replace("import torch\n", "import operator\n\nimport torch\n") + (
    "    @property\n    def scale(self):\n        self.calls += 1\n        return 2.0\n\n"
    "    def forward(self, x):\n        get = operator.attrgetter(\"scale\")\n        x = x * get(self)\n" + CHECK)


@pytest.mark.parametrize("text, reason", [
    (HASATTR, "self.calls += 1"),  # the getter hasattr runs is followed, and it writes
    (CACHED, "descriptor other than a plain property"),  # cached_property writes the instance's dict
    (ATTRGETTER, "self.calls += 1"),
], ids=["hasattr", "cached-property", "attrgetter"])
def test_reads_by_name_and_other_descriptors_decline_with_a_reason(text, reason):
    fixed, result = _fixed(text)
    assert "entries=" not in fixed and not [f for f in result.applied if f.rule == "GM301"]
    assert any(reason in d.reason for d in result.declined if d.rule == "GM301"), [d.reason for d in result.declined]


@pytest.mark.parametrize("statement", [
    'self.__dict__.update(calls=1)', 'vars(self).update(calls=1)', 'setattr(self, "calls", 1)',
    'object.__setattr__(self, "calls", 1)', 'self.__dict__["calls"] = 1', 'vars(self)["calls"] = 1',
    'self.__dict__.pop("calls")', 'torch.nn.Module.__setattr__(self, "calls", 1)',
])
def test_writes_through_the_instance_dict_decline(statement):
    text = HEAD + "    def forward(self, x):\n        " + statement + "\n" + CHECK
    fixed, result = _fixed(text)
    assert "entries=" not in fixed
    assert any("line 10" in d.reason for d in result.declined if d.rule == "GM301"), [d.reason for d in result.declined]


ANNOTATED = HEAD + (
    "    def _scale(self):\n        self.calls += 1\n        return 2.0\n\n    scale: float = property(_scale)\n\n"
    "    def forward(self, x):\n        x = x * self.scale\n" + CHECK)


def test_an_annotated_descriptor_is_not_taken_for_a_plain_value():
    fixed, result = _fixed(ANNOTATED)
    assert "entries=" not in fixed, "an annotated property() is a descriptor"
