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


# Decorators of the package whose code is read and shown to set only the class's __doc__: the
# class is read as its body, and the warning is fixed as it is without them.
DOC_DECORATORS = {
    "sets __doc__": ("def swap(cls):\n    cls.__doc__ = 'Utils.' + (cls.__doc__ or '')\n    return cls\n", "@swap"),
    "a factory that sets __doc__": ("def swap(*text):\n    def deco(cls):\n        cls.__doc__ = ''.join(text)\n"
                                    "        return cls\n\n    return deco\n", "@swap('Utils.')"),
}


@pytest.mark.parametrize("how", sorted(DOC_DECORATORS))
def test_a_class_decorator_that_only_sets_the_docstring_keeps_the_fix(tmp_path, how):
    deco, line = DOC_DECORATORS[how]
    _, plain = _tree(tmp_path)
    expected, _ = fix_package(plain, STACKS, rounds=1)
    orig, fixed = _tree(tmp_path)
    old = HIDDEN["class decorator"][0]
    for root in (orig, fixed):
        path = root / "pkg/mixin.py"
        text = path.read_text()
        assert old in text
        decorated = old.replace("\n\n\nclass Utils:", f"\nfrom .deco import swap  # noqa: E402\n{line}\nclass Utils:")
        path.write_text(text.replace(old, decorated))
        (root / "pkg/deco.py").write_text(deco)
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert [(f.rule, f.safety) for f in applied] == [(f.rule, f.safety) for f in expected] != [], [s.fix.notes for s in skipped]


# -- the import-time check: module-level code that runs the rewritten method before the runtime
# appended at the end of the file is defined ---------------------------------------------------

IMPORT_TIME = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        print("forward", x.shape)
        return x * 2


{tail}
'''


@pytest.mark.parametrize("tail", [
    "X = M\nX()(torch.ones(2))",  # the class under another name
    "REGISTRY = {'m': M}\nREGISTRY['m']()(torch.ones(2))",  # a registry
    "for cls in (M,):\n    cls()(torch.ones(2))",  # a loop over classes
])
def test_a_class_called_at_import_time_through_another_name_keeps_the_call(tmp_path, tail):
    """Was: only a call of the class's own name counted, so the print was deferred and the
    module's import failed (NameError: `_graphmend_deferred`, defined at the end of the file)."""
    from tests.transforms._side_effect_support import fix_program, load_module

    program = IMPORT_TIME.format(tail=tail)
    result = fix_program(program, codes=("GM2",))
    for text in (program, result.text):
        load_module(tmp_path, text)  # the original imports; so must the fixed program
    assert not result.applied and "while the module is still executing" in result.declined[0].reason
