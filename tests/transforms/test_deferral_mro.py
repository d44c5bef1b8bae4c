"""Deferral across files where the entry calls methods it inherits from a mixin of a third file.

The shape of transformers' layoutlmv3, bros and flava: ``mixin.py`` holds ``Utils`` (a warning of
constants in ``extended_mask``, the helpers ``head_mask``/``invert``), ``a.py`` the base
``Base(torch.nn.Module, Utils)``, ``b.py`` the model whose ``forward`` is the compiled entry. The
rule resolves ``self.<method>`` by Python's lookup across the package (``_mro.py``) and judges
the body it finds. A warning of constants is made in the graph by the op ``graphmend::deferred``:
a failure on values after it (an embedding id out of range) comes after it, as in the original,
so it is fixed where no record may be made before it in the region; a call given a tensor, or one
after a record, stays as written. Original and fixed run uncompiled, eager and aot_eager.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Frame, Safety  # noqa: E402
from graphmend.transforms._mro import Hierarchy  # noqa: E402
from graphmend.transforms.base import SourceFile  # noqa: E402
from tests.transforms.test_deferral_cross_file import (LOGGERS, _package, _write, fix_package, graphs_of, load,  # noqa: E402
                                                      run)
from tests.transforms.test_deferral_trace_faults import _differential  # noqa: E402

MIXIN = '''import logging
import warnings

import torch

logger = logging.getLogger("gmx")


class Utils:
    def extended_mask(self, mask):
        warnings.warn("careful", FutureWarning)
        return (1.0 - mask) * -100.0

    def head_mask(self, mask):
        {head}
        return mask

    def invert(self, mask):
        return mask * 2.0


class Module(torch.nn.Module):
    pass


# A logger made directly (by a getLogger that is not logging's), not one logging.getLogger
# returns: the runtime cannot name it, so a deferred call of its methods is a record the boundary
# replays.
from .loggers import getLogger  # noqa: E402

unnamed = getLogger("gmx.unnamed")
'''
WARN_LINE = 11

# Base derives from a module class of the rewritten file (as a model's PreTrainedModel does), so
# the runtime makes the entry a boundary when it is defined.
A = '''import torch

from .mixin import Module, Utils


class Base(Module, Utils):
    pass
'''

B = '''import torch

from .a import Base


class Model(Base):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(5, 3)

    def forward(self, ids, mask):
        head = self.head_mask(mask)
        extended = self.extended_mask(mask)
        {after}
'''
FORWARD_LINE = 13  # the line of `self.extended_mask(mask)` in b.py
STACKS = {"pkg/mixin.py": ((WARN_LINE, (Frame("pkg/b.py", FORWARD_LINE, "forward"),
                                        Frame("pkg/mixin.py", WARN_LINE, "extended_mask"))),)}
AFTER = "return self.table(ids) * extended.unsqueeze(-1) + self.invert(head).sum()"


def _tree(tmp_path, head="mask = mask + 0", after=AFTER, a=A):
    orig, fixed = _package(tmp_path, a=a, b=B.format(after=after))
    for root in (orig, fixed):
        _write(root, {"pkg/mixin.py": MIXIN.format(head=head), "pkg/loggers.py": LOGGERS})
    return orig, fixed


def _inputs():
    ids, mask = torch.tensor([1, 2]), torch.ones(2)
    # a passing call, an id out of range (the lookup fails when the graph runs), a mask whose
    # length does not fit (fails while Dynamo traces), a passing call again
    return [(ids, mask), (torch.tensor([1, 9]), mask), (ids, torch.ones(3)), (ids, mask)]


def test_a_constant_warning_before_an_embedding_lookup_is_made_in_the_graph_and_comes_out_first(tmp_path):
    """Before: declined (the lookup after it, and `self.head_mask`/`self.invert`, inherited from
    another file, not followed). Now fixed at `safe`: the methods are read where Python finds them,
    no record comes before the call, and the lookup fails after the op made the warning."""
    orig, fixed = _tree(tmp_path)
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert [(f.rule, f.safety) for f in applied] == [("GM203", Safety.SAFE)], [s.fix.notes for s in skipped]
    assert "made in the graph by the op graphmend::deferred" in applied[0].notes
    text = (fixed / "pkg/mixin.py").read_text()
    assert "entries=(__name__.rsplit('.', 1)[0] + '.b.Model',)" in text
    for backend, (events, outcomes) in _differential(orig, fixed, _inputs(), "always"):
        assert [o[0] for o in outcomes] == ["value", "raised", "raised", "value"], (backend, outcomes)
        assert outcomes[1][1] == "IndexError", (backend, outcomes)
        assert [e[:3] for e in events] == [("warn", "careful", "FutureWarning")] * 4, backend
    # the warning's break is gone: one graph (the op made the warning in it)
    counts = [graphs_of(load(root, "pkg.b").Model(), *_inputs()[0])[1] for root in (orig, fixed)]
    assert counts[0] > 1 and counts[1] == 1, counts


@pytest.mark.parametrize("head, why", [
    ('unnamed.warning("heads %s", 1)', "before it in the region, may be deferred as a record"),
    ("mask = helper_elsewhere(mask)", "before it in the region: code not read"),
])
def test_a_record_or_code_not_read_before_the_call_keeps_the_lookup_a_reason(tmp_path, head, why):
    """A deferred call of a logger the runtime cannot name, in the mixin before the warning, is a
    record; the warning after a record in the region is recorded too (to keep the order), and a
    record is lost when the lookup fails: so the failure on values after it counts again, and the
    call stays as written."""
    mixin_head = head if "helper" not in head else "from .c import helper_elsewhere\n        " + head
    orig, fixed = _tree(tmp_path, head=mixin_head)
    for root in (orig, fixed):
        _write(root, {"pkg/c.py": "def helper_elsewhere(m):\n    return m\n"})
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and [s.fix.safety for s in skipped] == [Safety.UNSAFE]
    notes = skipped[0].fix.notes
    assert "looks ids up in an embedding table" in notes and why in notes, notes


def test_why_a_record_before_the_call_matters_the_runtime_records_the_warning_after_it(tmp_path):
    """The program the rule refuses to write, by hand: the mixin's Logger call deferred before the
    warning (a logger made directly: a record), then the warning. The runtime records the warning
    too (to keep the order), and the id out of range loses both records with the graph, where the
    original showed both."""
    orig, fixed = _tree(tmp_path)
    applied, _ = fix_package(fixed, STACKS, rounds=1)
    assert len(applied) == 1
    entries = "entries=(__name__.rsplit('.', 1)[0] + '.b.Model',)"
    for root, head in ((orig, 'unnamed.warning("heads %s", 1)'),
                       (fixed, f'_graphmend_deferred(unnamed.warning, "log", 15, "head_mask", {entries})("heads %s", 1)')):
        path = root / "pkg/mixin.py"
        path.write_text(path.read_text().replace("mask = mask + 0", head))
    bad = (torch.tensor([1, 9]), torch.ones(2))
    shown = []
    for root in (orig, fixed):
        compiled, _ = graphs_of(load(root, "pkg.b").Model(), *_inputs()[0])
        shown.append(run(compiled, *bad))
    assert [e[0] for e in shown[0][0]] == ["log", "warn"] and shown[1] == ([], ("raised", "IndexError"))


def test_a_record_made_in_the_arguments_of_the_entrys_call_comes_before_it(tmp_path):
    """`self.extended_mask(self.head_mask(mask))`: the argument runs first, its record too."""
    orig, fixed = _package(tmp_path, a=A, b=B.format(after=AFTER).replace(
        "head = self.head_mask(mask)\n        extended = self.extended_mask(mask)",
        "head = mask\n        extended = self.extended_mask(self.head_mask(mask))"))
    for root in (orig, fixed):
        _write(root, {"pkg/mixin.py": MIXIN.format(head='unnamed.warning("heads %s", 1)'), "pkg/loggers.py": LOGGERS})
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and "before it in the region, may be deferred as a record" in skipped[0].fix.notes


def test_a_mixin_method_that_may_fail_while_tracing_after_a_call_given_a_tensor_stays_declined(tmp_path):
    """A print of a tensor made in the trace that fails cannot be made from it: the mixin's
    `invert`, read in its own file, reshapes its input (a trace-time failure on a wrong size)."""
    mixin = MIXIN.replace('warnings.warn("careful", FutureWarning)', 'print("mask", mask.sum())') \
        .replace("return mask * 2.0", "return mask.view(2)")
    orig, fixed = _package(tmp_path, a=A, b=B.format(after="return self.invert(extended)"))
    for root in (orig, fixed):
        _write(root, {"pkg/mixin.py": mixin.format(head="mask = mask + 0")})
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and [s.fix.rule for s in skipped] == ["GM201"]
    notes = skipped[0].fix.notes
    assert "`mask.view(2)` at pkg/mixin.py:19 may fail while Dynamo traces it" in notes, notes


@pytest.mark.parametrize("base", [
    "from json import JSONDecoder\n\n\nclass Base(Module, Utils, JSONDecoder):",  # outside the package
    "Base2 = Utils\n\n\nclass Base(Module, Base2 if True else Utils):",  # not a name
])
def test_a_base_that_cannot_be_resolved_leaves_the_inherited_methods_unread(tmp_path, base):
    a = A.replace("class Base(Module, Utils):", base)
    orig, fixed = _tree(tmp_path, a=a)
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert applied == [] and [s.fix.safety for s in skipped] == [Safety.UNSAFE]
    assert "before it in the region: code not read" in skipped[0].fix.notes, skipped[0].fix.notes


# -- the lookup itself ---------------------------------------------------------------------------

def _hierarchy(tmp_path: Path, files: dict[str, str]) -> Hierarchy:
    _write(tmp_path, {"pkg/__init__.py": "", **files})
    return Hierarchy(str(tmp_path), lambda rel: SourceFile(rel, (tmp_path / rel).read_text()))


def _found(h: Hierarchy, ref, name):
    got = h.lookup(ref, name)
    return got if isinstance(got, str) else (got[0].path, got[1].name.value)


def test_the_lookup_follows_c3_not_the_order_the_bases_are_listed_in(tmp_path):
    """class X(P, Q), P(R): Python looks in X, P, R, Q; a breadth-first walk would find Q's."""
    h = _hierarchy(tmp_path, {
        "pkg/r.py": "class R:\n    def m(self):\n        return 1\n",
        "pkg/x.py": ("from .r import R\n\n\nclass P(R):\n    pass\n\n\nclass Q:\n    def m(self):\n        return 2\n\n\n"
                     "class X(P, Q):\n    pass\n"),
    })
    assert h.mro(("pkg/x.py", "X")) == [("pkg/x.py", "X"), ("pkg/x.py", "P"), ("pkg/r.py", "R"), ("pkg/x.py", "Q")]
    assert _found(h, ("pkg/x.py", "X"), "m") == ("pkg/r.py", "R")


@pytest.mark.parametrize("x, why", [
    ("from .r import R\n\n\nclass X(R):\n    def __init__(self):\n        self.m = print\n", "assigns self.m"),
    ("from .r import R\n\n\nclass X(R):\n    m = staticmethod(print)\n", "other than by one method"),
    ("from .r import R\n\n\nclass X(R):\n    @property\n    def m(self):\n        return print\n", "decorated"),
    ("from .r import R\nR = object\n\n\nclass X(R):\n    pass\n", "bound 2 times"),
    ("from .r import R\n\n\nclass X(R, metaclass=type):\n    pass\n", "metaclass"),
    ("import torch\nfrom .r import R\n\n\nclass X(torch.nn.Module, R):\n    pass\n", None),
    ("import torch\nfrom .r import R\n\n\nclass X(torch.nn.Module, R):\n    pass\n", "torch.nn.Module's"),
])
def test_what_the_lookup_does_not_show_is_a_reason(tmp_path, x, why):
    h = _hierarchy(tmp_path, {"pkg/r.py": "class R:\n    def m(self):\n        return 1\n\n    def to(self):\n        return 2\n",
                              "pkg/x.py": x})
    if why is None:
        assert _found(h, ("pkg/x.py", "X"), "m") == ("pkg/r.py", "R")
    elif why == "torch.nn.Module's":
        assert why in _found(h, ("pkg/x.py", "X"), "to")  # nn.Module comes first and defines to()
    else:
        assert why in _found(h, ("pkg/x.py", "X"), "m")
