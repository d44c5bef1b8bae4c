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

# how the decorator name is bound again -> (the import and decorator line before `class Utils:`, files of the package)
REBOUND = {
    # deco.py shows a decorator that sets __doc__, then a star import replaces it
    "a star import after the def": ("from .deco import swap  # noqa: E402\n@swap",
                                    {"pkg/deco.py": DOC_ONLY + STAR, "pkg/impl.py": DECO}),
    # mixin.py imports the read decorator, and a star import later in mixin.py rebinds the name
    "a star import in the class's file": ("from .deco import swap  # noqa: E402\n" + STAR + "@swap",
                                          {"pkg/deco.py": DOC_ONLY, "pkg/impl.py": DECO}),
    # a star import in a `try`, as for an optional faster implementation
    "a star import in a try": ("from .deco import swap  # noqa: E402\n@swap", {
        "pkg/deco.py": DOC_ONLY + "try:\n    from .impl import *  # noqa: F401,F403\nexcept ImportError:\n    pass\n",
        "pkg/impl.py": DECO}),
    # a package that re-exports the read decorator, then star-imports a module that rebinds it
    "a star import in a re-exporting package": ("from .decos import swap  # noqa: E402\n@swap", {
        "pkg/decos/__init__.py": "from .real import swap  # noqa: F401\n" + STAR, "pkg/decos/real.py": DOC_ONLY,
        "pkg/decos/impl.py": DECO.replace("from .mixin", "from ..mixin")}),
    # the names of another module copied into the decorator's module
    "globals().update": ("from .deco import swap  # noqa: E402\n@swap", {
        "pkg/deco.py": DOC_ONLY + "import importlib  # noqa: E402\n\n"
        "globals().update(vars(importlib.import_module('pkg.impl')))\n", "pkg/impl.py": DECO}),
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
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_text(body)
    return orig, fixed


@pytest.mark.parametrize("how", sorted(REBOUND))
def test_a_decorator_name_bound_again_when_a_module_runs_is_not_trusted(tmp_path, how):
    orig, fixed = _rebound(tmp_path, how)
    shown = run(load(orig, "pkg.b").Model(), *_inputs()[0])
    assert [e[:2] for e in shown[0]] == [("log", "heads 1"), ("warn", "careful")], shown  # what the original runs
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and all(s.fix.safety is Safety.UNSAFE for s in skipped), [(f.rule, f.notes) for f in applied]


@pytest.mark.xfail(strict=True, reason="a store into the decorator's module from another file (`deco.swap = impl.swap` "
                   "in pkg/__init__.py) is not seen: the check reads deco.py's def, which sets only __doc__, while the "
                   "class is decorated by impl.swap, which replaces Utils.head_mask; GM203 makes the warning in the "
                   "graph and the original's logger record of the replaced method is lost to the analysis")
def test_a_decorator_replaced_by_a_store_into_its_module_is_not_trusted(tmp_path):
    cases = {"patched": ("from .deco import swap  # noqa: E402\n@swap", {
        "pkg/__init__.py": "from . import deco, impl\n\ndeco.swap = impl.swap\n", "pkg/deco.py": DOC_ONLY, "pkg/impl.py": DECO})}
    orig, fixed = _rebound(tmp_path, "patched", cases)
    shown = run(load(orig, "pkg.b").Model(), *_inputs()[0])
    assert [e[:2] for e in shown[0]] == [("log", "heads 1"), ("warn", "careful")], shown
    applied, _ = fix_package(fixed, STACKS, rounds=1)
    assert applied == [], [(f.rule, f.notes) for f in applied]


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
