"""Red-team programs for the class decorators ``_class_decorators`` trusts (through ``_mro``'s lookup).

The shape of test_deferral_mro_redteam.py: ``Utils`` in ``pkg/mixin.py`` is decorated, and the
decorator the check reads (or trusts by name) is shown to set only ``__doc__``; but the name the
class is decorated with is bound, when the module runs, to another decorator that replaces
``Utils.head_mask`` by ``_heads`` (a Logger call the runtime cannot name: a record). The original
runs ``_heads``; the rule must read the ``head_mask`` that runs and decline, as it does for an
undecorated replacement (test_deferral_mro_redteam.py). A name that is not rebound keeps the fix.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from tests.transforms.test_deferral_cross_file import load, run  # noqa: E402
from tests.transforms.test_deferral_mro import STACKS, _inputs, _tree, fix_package  # noqa: E402
from tests.transforms.test_deferral_mro_redteam import DECO, HEADS, HIDDEN  # noqa: E402

DOC_ONLY = "def swap(cls):\n    cls.__doc__ = 'Utils.' + (cls.__doc__ or '')\n    return cls\n"
STAR = "from .impl import *  # noqa: E402,F401,F403\n"

# how the decorator is bound -> (the import and decorator line before `class Utils:`, files of the package)
REBOUND = {
    # deco.py shows a decorator that sets __doc__, then a star import replaces it
    "a star import after the def": ("from .deco import swap  # noqa: E402\n@swap",
                                    {"pkg/deco.py": DOC_ONLY + STAR, "pkg/impl.py": DECO}),
    # mixin.py imports the read decorator, and a star import later in mixin.py rebinds the name
    "a star import in the class's file": ("from .deco import swap  # noqa: E402\n" + STAR + "@swap",
                                          {"pkg/deco.py": DOC_ONLY, "pkg/impl.py": DECO}),
    # the trusted transformers decorator, rebound by a star import of the package's own module
    "auto_docstring rebound by a star import": (
        "from transformers.utils import auto_docstring  # noqa: E402\n" + STAR + "@auto_docstring",
        {"pkg/impl.py": DECO.replace("def swap(", "def auto_docstring(")}),
}


def _rebound(tmp_path, how, cases=REBOUND):
    line, files = cases[how]
    orig, fixed = _tree(tmp_path)
    old = HIDDEN["class decorator"][0]
    for root in (orig, fixed):
        path = root / "pkg/mixin.py"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, old.replace("\n\n\nclass Utils:", f"\n{line}\nclass Utils:")) + HEADS)
        for name, body in files.items():
            (root / name).write_text(body)
    return orig, fixed


@pytest.mark.parametrize("how", sorted(REBOUND))
def test_a_decorator_name_rebound_by_a_star_import_is_not_trusted(tmp_path, how):
    orig, fixed = _rebound(tmp_path, how)
    shown = run(load(orig, "pkg.b").Model(), *_inputs()[0])
    assert [e[:2] for e in shown[0]] == [("log", "heads 1"), ("warn", "careful")], shown  # what the original runs
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and all(s.fix.safety is Safety.UNSAFE for s in skipped), [(f.rule, f.notes) for f in applied]


# A star import before the decorator's def: the decorator read is the one that runs, and the class
# is read as its body.
KEPT = {
    "a star import before the def": ("from .deco import swap  # noqa: E402\n@swap",
                                     {"pkg/deco.py": STAR + DOC_ONLY, "pkg/impl.py": DECO}),
}


@pytest.mark.parametrize("how", sorted(KEPT))
def test_a_star_import_that_cannot_rebind_the_decorator_keeps_the_fix(tmp_path, how):
    _, plain = _tree(tmp_path)
    expected, _ = fix_package(plain, STACKS, rounds=1)
    _, fixed = _rebound(tmp_path, how, KEPT)
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert [(f.rule, f.safety) for f in applied] == [(f.rule, f.safety) for f in expected] != [], [s.fix.notes for s in skipped]
