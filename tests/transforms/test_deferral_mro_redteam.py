"""Red-team programs for deferral across files through inherited methods (``_mro.py``).

The shape of test_deferral_mro.py: ``mixin.py`` holds ``Utils`` (a warning of constants in
``extended_mask``, ``head_mask`` run before it), ``b.py`` the model whose ``forward`` is the
compiled entry and looks ids up in an embedding table after the warning. The rule makes the
warning in the graph only where no record may come before it in the region: a record before it
makes the runtime record the warning too, and an id out of range loses both (shown by hand in
test_deferral_mro.py's ``test_why_a_record_before_the_call_matters...``). So the rule must read the
``head_mask`` that runs. Here code outside the method's ``def`` makes ``head_mask`` a function
whose Logger call (of a logger the runtime cannot name) is a record: the rule must decline, as it
does when that call is in the ``def`` itself.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms.test_deferral_cross_file import load, run  # noqa: E402
from tests.transforms.test_deferral_mro import STACKS, _inputs, _tree, fix_package  # noqa: E402

HEADS = '''

def _heads(self, mask):
    unnamed.warning("heads %s", 1)
    return mask
'''

DECO = '''def swap(cls):
    def head_mask(self, mask):
        from .mixin import _heads

        return _heads(self, mask)

    cls.head_mask = head_mask
    return cls
'''

# Each replaces Utils.head_mask (which reads `mask = mask + 0`) by `_heads`, defined at the end of
# the file (the lines of the warning stay those of STACKS), when the classes are made.
HIDDEN = {
    # (`swap` from another file, imported on a line of its own: the lines stay those of STACKS)
    "class decorator": ("import warnings\n\nimport torch\n\nlogger = logging.getLogger(\"gmx\")\n\n\nclass Utils:",
                        "import warnings\n\nimport torch\n\nlogger = logging.getLogger(\"gmx\")\nfrom .deco import swap  # noqa: E402\n@swap\nclass Utils:", ""),
    "store on the class": ("", "", "Utils.head_mask = _heads\n"),
    "setattr on the class": ("", "", "setattr(Utils, 'head_mask', _heads)\n"),
    "__init_subclass__": ("    def invert(self, mask):",
                          "    def __init_subclass__(cls, **kwargs):\n        super().__init_subclass__(**kwargs)\n"
                          "        cls.head_mask = lambda self, mask: _heads(self, mask)\n\n    def invert(self, mask):", ""),
}


def _hidden(tmp_path, how):
    old, new, end = HIDDEN[how]
    orig, fixed = _tree(tmp_path)
    for root in (orig, fixed):
        path = root / "pkg/mixin.py"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new) + HEADS + end)
        (root / "pkg/deco.py").write_text(DECO)
    return orig, fixed


@pytest.mark.parametrize("how", sorted(HIDDEN))
def test_a_method_replaced_outside_its_def_is_not_read_as_the_def(tmp_path, how):
    orig, fixed = _hidden(tmp_path, how)
    shown = run(load(orig, "pkg.b").Model(), *_inputs()[0])
    assert [e[:2] for e in shown[0]] == [("log", "heads 1"), ("warn", "careful")], shown  # what the original runs
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and [s.fix.safety for s in skipped] == [Safety.UNSAFE], [(f.rule, f.notes) for f in applied]
