"""Later uses of what a predicated site made or read (``_later``): layout, saved tensors, printing.

The programs below were written against the analysis, not for it: views through ``.T``, a
helper that calls ``.view``, ``reshape`` that makes a view on one path and a copy on the other,
``narrow``, a later ``.data_ptr()``, an f-string, and the names a site binds again. Each is run
before and after ``fix`` (uncompiled and compiled with ``eager``/``aot_eager``) and must be the
same program or declined; the declines are also asserted with the use they name, and each
hazard was checked to change the program when the rewrite is applied anyway (the rules before
this module rewrote them all).
"""

from __future__ import annotations

import libcst as cst
import pytest
import torch

from graphmend.transforms import _analysis as A
from graphmend.transforms import _later as L
from tests.transforms._side_effect_support import load_module
from tests.transforms.test_predication_redteam import _declined_or_same, _grad
from tests.transforms.test_predication_soundness import _fix


def _reasons(result) -> str:
    return " | ".join(d.reason for d in result.declined)


def _transposed():
    return torch.arange(6.0).reshape(2, 3)


# --- layout: programs not designed for -----------------------------------------------------------

TRANSPOSE_AS_STRIDED = """
class Window(nn.Module):
    def forward(self, scores, values):
        heads = values.T
        if scores.sum() > 0:
            out = heads * 2
        else:
            out = heads.contiguous() + 1
        return torch.as_strided(out, (6,), (1,))
"""

RESHAPE_VIEW = """
def merge(scores, values):
    v = values.t()
    if scores.sum() > 0:
        out = v * 2
    else:
        out = v.contiguous() * 3
    return out.reshape(3, 2).view(-1)
"""

NARROW_VIEW = """
def first_rows(scores, values):
    v = values.t()
    if scores.sum() > 0:
        out = v + 1
    else:
        out = v.contiguous() - 1
    head = out.narrow(0, 0, 2)
    return head.view(-1)
"""

DATA_PTR = """
def shares(scores, values):
    v = values.t()
    out = v + 1 if scores.sum() > 0 else v.contiguous() - 1
    return out * 1, out.data_ptr() == out.reshape(-1).data_ptr()
"""


@pytest.mark.parametrize("body, entry, use", [
    (TRANSPOSE_AS_STRIDED, "Window", "`torch.as_strided(out, (6,), (1,))` at line"),
    (RESHAPE_VIEW, "merge", "`out.reshape(3, 2).view(-1)` at line"),
    (NARROW_VIEW, "first_rows", "`head.view(-1)` at line"),
    (DATA_PTR, "shares", "`out.data_ptr()` at line"),
])
def test_a_later_use_of_the_layout_is_declined_and_the_program_kept(tmp_path, body, entry, use):
    text, result = _fix(body, dynamic=True)
    assert not result.applied and use in _reasons(result), _reasons(result)
    assert "does not keep the strides of the branch taken" in _reasons(result)

    def positive():
        return torch.ones(3), _transposed()

    def negative():
        return -torch.ones(3), _transposed()

    _declined_or_same(tmp_path, body, entry, [positive, negative])


def test_the_select_really_changes_those_programs():
    """What the declines protect: the select's strides follow the first arm, not the one taken."""
    v = _transposed().t()
    taken_contiguous = torch.where(torch.tensor(False), v * 2, v.contiguous() + 1)
    assert (v.contiguous() + 1).is_contiguous() and not taken_contiguous.is_contiguous()
    with pytest.raises(RuntimeError):
        taken_contiguous.view(-1)
    # `.contiguous()` on the select is no copy that makes it exact: it returns the tensor itself
    # when it is contiguous already, so the strides of the other path are still not the branch's
    kept = torch.where(torch.tensor(True), v.contiguous() + 1, v * 2)
    assert kept.contiguous() is kept and (v * 2).stride() != kept.stride()


def test_arms_of_one_layout_keep_coverage_when_the_value_leaves(tmp_path):
    """The clamp family: `h.clamp(...)` and `h` share a layout, so returning the select (or
    handing it to a submodule) stays rewritten; only a direct layout read would decline it."""
    body = """
    class Block(nn.Module):
        def forward(self, x):
            h = x * 2
            if h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):
                limit = torch.finfo(h.dtype).max - 1000
                h = torch.clamp(h, min=-limit, max=limit)
            outputs = (h,)
            return outputs
    """
    text, result = _fix(body, dynamic=True)
    assert result.applied, _reasons(result)
    big = torch.full((2, 3), 60000.0, dtype=torch.float16)
    _declined_or_same(tmp_path, body, "Block", [lambda: (_grad(big),), lambda: (_grad(torch.ones(2, 3).half()),)])


def test_a_helper_that_views_the_value_is_declined(tmp_path):
    """A helper the rule cannot see into may read the strides (and may write its argument)."""
    body = """
def merge(t):
    return t.view(-1)


def heads(scores, values):
    v = values.T
    if scores.sum() > 0:
        out = v * 2
    else:
        out = v.contiguous() + 1
    return merge(out)
"""
    text, result = _fix(body, dynamic=True)
    assert not result.applied and "`merge(...)`" in _reasons(result), _reasons(result)


# --- saved tensors and names the site binds again ------------------------------------------------

def test_an_alias_of_a_rebound_name_written_later_is_declined(tmp_path):
    """`h` is bound again by the site, so `h.add_` writes the new tensor; `g` still holds the
    old one, which the arm not taken (`h.clamp`) saved for backward."""
    body = """
def f(x):
    h = x * 1.5
    g = h
    if h.sum() > 0:
        h = h.clamp(max=1.0)
    g.add_(1)
    return h + g
"""
    text, result = _fix(body, dynamic=True)
    assert "`g.add_(1)` updates a tensor in place" in _reasons(result), _reasons(result)
    _declined_or_same(tmp_path, body, "f", [lambda: (_grad(torch.ones(3)),), lambda: (_grad(-torch.ones(3)),)])


def test_a_rebound_name_written_later_stays_rewritten(tmp_path):
    body = """
def f(x):
    h = x * 1.5
    if h.sum() > 0:
        h = h.clamp(max=1.0)
    h.add_(1)
    return h
"""
    text, result = _fix(body, dynamic=True)
    assert result.applied, _reasons(result)
    _declined_or_same(tmp_path, body, "f", [lambda: (_grad(torch.ones(3)),), lambda: (_grad(-torch.ones(3)),)])


def test_a_name_bound_again_after_the_site_is_not_rebound():
    module = cst.parse_module("def f(x, y):\n    if x:\n        h = 1\n        k = 2\n    h = y\n    h.add_(1)\n")
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(cst.metadata.PositionProvider)
    func = module.body[0]
    site = func.body.body[0]
    assert L.rebound(func, site, positions, {"h", "k"}) == {"k"}


def test_saved_tensors_are_not_a_hazard_without_autograd(tmp_path):
    body = """
@torch.no_grad()
def block(x):
    h = x * 3
    if x.sum() > 0:
        y = h * 2
    else:
        y = h * h
    h.add_(1)
    print(y)
    return y + h
"""
    text, result = _fix(body, dynamic=True)
    assert result.applied, _reasons(result)
    _declined_or_same(tmp_path, body, "block", [lambda: (torch.ones(2, 3),), lambda: (-torch.ones(2, 3),)])


# --- printing -------------------------------------------------------------------------------------

def test_an_f_string_of_a_selected_value_is_declined(tmp_path, capsys):
    body = """
def show(x):
    y = x * 2 if x.sum() > 0 else x * 3
    print(f"activation {y}")
    return y
"""
    text, result = _fix(body, dynamic=True)
    assert "the f-string at line" in _reasons(result), _reasons(result)


def test_a_value_computed_from_the_select_prints_the_same_and_stays_rewritten(tmp_path, capsys):
    """`y.detach()` prints no grad_fn, `y.sum()` its own: the select is not what is printed."""
    body = """
def show(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x * 3
    print(y.detach(), y.sum())
    return y
"""
    text, result = _fix(body, dynamic=True)
    assert result.applied, _reasons(result)
    printed = []
    for source in (text, result.text):
        fn = load_module(tmp_path, source).show
        for sign in (1.0, -1.0):
            fn(_grad(torch.full((2,), sign)))
        printed.append(capsys.readouterr().out)
    assert "SumBackward0" in printed[0] and printed[1] == printed[0]


# --- the pieces -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arms, same", [
    (["torch.clamp(h, min=-limit, max=limit)", "h"], True),
    (["h * 2", "h + 1"], True),
    (["heads * 2", "heads.contiguous() + 1"], False),
    (["x", "y"], True),  # not evident: arms over other tensors (documented limit)
    (["x.T * 2", "x * 2"], False),
    (["x[:, ::2]", "x"], False),
])
def test_evident_layouts(arms, same):
    t = A.torch_names_of(cst.parse_module("import torch\n"))
    assert L.evident_layouts([cst.parse_expression(a) for a in arms], t) is same


def _site(code: str):
    module = cst.parse_module(code)
    positions = cst.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
    func = module.body[0]
    site = next(s for s in func.body.body if isinstance(s, cst.If))
    return func, site, positions


@pytest.mark.parametrize("later, hazard", [
    ("h.add_(1)", None),  # the new tensor
    ("g.add_(1)", "`g.add_(1)` updates a tensor in place"),  # the old one, through its other name
])
def test_later_write_skips_a_rebound_name_but_not_its_aliases(later, hazard):
    from graphmend.transforms import _effects as E

    func, site, positions = _site(f"def f(x, c):\n    h = x * 1.5\n    g = h\n    if c:\n        h = h.clamp(max=1.0)\n"
                                  f"    {later}\n    return h\n")
    t = A.torch_names_of(cst.parse_module("import torch\n"))
    bound = L.rebound(func, site, positions, {"h"})
    assert bound == {"h"}
    found = E.later_write(func, site, positions, {"h"}, t, A.FRESH, E.Modules(), rebound=bound)
    assert (found is None) if hazard is None else (hazard in found), found
    # without the exemption the write through `h` counts (the first version's over-reach)
    assert E.later_write(func, site, positions, {"h"}, t, A.FRESH, E.Modules()) is not None
