"""Later uses attacked: programs whose code after a predicated site reaches the select indirectly.

``_later`` declines a GM101/GM402 site when the code after it can tell ``torch.where(c, a, b)``
from the ``if``: a layout read, an in-place update of a tensor autograd saved, the select's text
(its ``grad_fn``), an update that no longer reaches the caller's tensor. The programs below reach
the selected value, or a tensor the arms read, by other roads than a plain name: a container it
was appended to, a comprehension or ``map``, ``getattr``, ``torch.Tensor.<method>(t, ...)``, a
walrus, an alias, ``.detach()`` (it shares the version counter), a ``torch._foreach_*_`` list, a
nested function defined before the site and called after it, ``is``/``id``.

Each is run before and after ``fix`` (uncompiled and compiled with ``eager``/``aot_eager``, on
inputs taking each outcome) and must be declined or the same program: values, requires_grad,
gradients of every leaf, identity, the exception, the text printed and the arguments' values
after the call. The uses in the ``*_FOUND`` tables were rewritten once and then did something
else (the ``*_HELD`` ones were not); they are declined, with a reason that names the use.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch

from tests.transforms.test_predication_redteam import _declined_or_same, _grad
from tests.transforms.test_predication_soundness import _fix, _observe


def _seen(fn, args) -> dict:
    """:func:`_observe`, with the text printed during the call and the arguments after it (and
    backward's exception: ``_observe`` lets it through)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            seen = _observe(fn, args)
        except RuntimeError as error:
            seen = {"backward": str(error).splitlines()[0]}
    seen["printed"] = re.sub(r" at 0x[0-9a-f]+", "", text.getvalue())
    seen["arguments"] = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    return seen


def _same_text_and_arguments(before: dict, after: dict, what: str) -> None:
    assert after["printed"] == before["printed"], (what, before["printed"], after["printed"])
    for x, y in zip(before["arguments"], after["arguments"]):
        torch.testing.assert_close(y, x, rtol=0, atol=0, msg=lambda m: f"{what}: argument {m}")


def _kept(tmp_path, body: str, entry: str, inputs) -> None:
    """Declined, or the same program for every maker of arguments in ``inputs``, in every mode,
    its printed text and the arguments after the call included."""
    _declined_or_same(tmp_path, body, entry, inputs, observe=_seen, also=_same_text_and_arguments)


def _cases(held: dict, found: dict, forms=("statement", "expression"), holding=()):
    """(form, use, found) parameters: the uses that held, then those found rewritten (each with
    every site form, except the (name, form) pairs in ``holding``, declined already then)."""
    return [pytest.param(form, use, False, id=f"{form}-{name}") for name, use in held.items() for form in forms] + [
        pytest.param(form, use, (name, form) not in holding, id=f"{form}-{name}")
        for name, use in found.items() for form in forms]


def _tried(tmp_path, body: str, entry: str, reason: str | None, inputs) -> None:
    """Declined with ``reason`` among the reasons, where one is given; in any case :func:`_kept`."""
    if reason is not None:
        assert reason in _declined(body)
    _kept(tmp_path, body, entry, inputs)


def _signs(*shape, grad: bool = True):
    """Makers of one argument of ones and one of minus ones: each outcome of ``x.sum() > 0``."""
    wrap = _grad if grad else (lambda t: t)
    return [lambda: (wrap(torch.ones(shape)),), lambda: (wrap(-torch.ones(shape)),)]


def _cached():
    return torch.ones(3), torch.arange(6.0).reshape(2, 3).t(), torch.ones(3, 2)


def _fresh():
    return -torch.ones(3), torch.arange(6.0).reshape(2, 3).t(), torch.ones(3, 2)


# (scores, cached, fresh): a positive score picks the transposed cache, a negative one the fresh keys
LAYOUT_INPUTS = [_cached, _fresh]


def _declined(body: str) -> str:
    text, result = _fix(body, dynamic=True)
    assert not result.applied and result.text == text, result.text
    return " | ".join(d.reason for d in result.declined)


# --- layout: a decoding step picks the cached or the fresh keys, then merges heads ---------------
# Under no_grad the arms may read different tensors; `evident_layouts` cannot see that the cache is
# transposed and the fresh keys are not, so only a read of the layout declines the site.

LAYOUT = """
@torch.no_grad()
def merge(scores, cached, fresh):
    {site}
{use}
"""
LAYOUT_SITES = {
    "statement": "if scores.sum() > 0:\n        keys = cached * 2\n    else:\n        keys = fresh * 2",
    "expression": "keys = cached * 2 if scores.sum() > 0 else fresh * 2",
}

LAYOUT_HELD = {
    "tuple_index": "    pair = (keys, fresh)\n    return pair[0].view(-1)",
    "zip_loop": "    flat = []\n    for k, f in zip([keys], [fresh]):\n        flat.append(k.view(-1))\n    return flat[0]",
    "closure": "    flatten = lambda: keys.view(-1)\n    return flatten()",
    "list_concatenated": "    outs = [fresh]\n    outs += [keys]\n    return outs[1].view(-1)",
    "transposes": "    return keys.mT.T.view(-1)",
    "dict_item": "    cache = {}\n    cache['k'] = keys\n    return cache['k'].view(-1)",
    "getattr_shape": "    return keys.reshape(-1), getattr(keys, 'shape')",
}
LAYOUT_FOUND = {
    "appended": "    outs = []\n    outs.append(keys)\n    return outs[-1].view(-1)",
    "extended": "    outs = []\n    outs.extend((keys,))\n    return outs[0].view(-1)",
    "inserted": "    outs = []\n    outs.insert(0, keys)\n    return outs[0].view(-1)",
    "setdefault": "    cache = {}\n    cache.setdefault('k', keys)\n    return cache['k'].view(-1)",
    "comprehension": "    return torch.cat([k.view(-1) for k in (keys, fresh)])",
    "generator": "    return torch.cat(tuple(k.view(-1) for k in (keys, fresh)))",
    "tensor_method": "    return torch.Tensor.view(keys, -1)",
    "getattr": "    return getattr(keys, 'view')(-1)",
    "getattr_is_contiguous": "    contiguous = getattr(keys, 'is_contiguous')\n    return keys * 1, contiguous()",
    "walrus": "    if (k := keys) is not None:\n        return k.view(-1)\n    return fresh",
    "map_lambda": "    return list(map(lambda k: k.view(-1), [keys]))[0]",
}


@pytest.mark.parametrize("form, use, found", _cases(LAYOUT_HELD, LAYOUT_FOUND))
def test_a_layout_read_through_another_road_is_declined(tmp_path, form, use, found):
    """The select has the cache's strides on the fresh path too."""
    body = LAYOUT.format(site=LAYOUT_SITES[form], use=use)
    if found:
        # the statement form may decline first for the call that receives the select (`map`, the
        # method `getattr` fetched): it may also update it in place
        reasons = _declined(body)
        assert "depends on the strides of a selected value" in reasons or (
            form == "statement" and "is not known to leave its arguments unchanged" in reasons), reasons
    _kept(tmp_path, body, "merge", LAYOUT_INPUTS)


# `reshape`/`flatten`/`contiguous` share the select's memory on one path and copy it on the other:
# an update of either no longer reaches the other (the statement form declined these already, as
# an update through an alias of a selected name).
SHARED_FOUND = {
    "reshaped": "    flat = keys.reshape(-1)\n    flat.zero_()\n    return keys",
    "flattened": "    flat = keys.flatten()\n    flat[0] = 100.0\n    return keys * 1",
    "contiguous": "    dense = keys.contiguous()\n    keys.add_(1)\n    return dense",
}


@pytest.mark.parametrize("form, use, found", _cases({}, SHARED_FOUND, holding={(n, "statement") for n in SHARED_FOUND}))
def test_an_update_through_a_reshape_of_the_select_is_declined(tmp_path, form, use, found):
    body = LAYOUT.format(site=LAYOUT_SITES[form], use=use)
    reasons = _declined(body)
    assert ("shares a selected value's memory where its strides allow" in reasons) == found, reasons
    _kept(tmp_path, body, "merge", LAYOUT_INPUTS)


# --- saved tensors: a residual stream updated in place after an optional squash ------------------

SAVED = """
def block(x):
    h = x * 3
{before}
    {site}
{use}
    return y + h
"""
# The condition reads `h`, so `h` is not complex and `clamp` cannot raise; the arms are finite in
# backward for any input: only the saved tensor is at stake.
SAVED_SITES = {
    "statement": "if h.sum() > 0:\n        y = h * 2\n    else:\n        y = h.clamp(min=0.0)",
    "expression": "y = h * 2 if h.sum() > 0 else h.clamp(min=0.0)",
}
SAVED_HELD = {
    "no_grad_region": ("", "    with torch.no_grad():\n        h.add_(1)"),
    "setitem_dunder": ("", "    h.__setitem__(0, 5.0)"),
    "tensor_method": ("", "    torch.Tensor.add_(h, 1)"),
    "comprehension": ("", "    [t.add_(1) for t in (h,)]"),
    "appended_then_loop": ("    hs = []\n    hs.append(h)", "    for t in hs:\n        t.add_(1)"),
    "out_keyword": ("", "    torch.add(h, 1, out=h)"),
}
SAVED_FOUND = {
    "closure_called_after": ("    def bump():\n        h.add_(1)", "    bump()"),
    "detach": ("", "    h.detach().add_(1)"),
    "foreach": ("", "    torch._foreach_add_([h], 1)"),
    "getattr": ("", "    getattr(h, 'add_')(1)"),
    "walrus": ("", "    (g := h).add_(1)"),
    "map_lambda": ("", "    list(map(lambda t: t.add_(1), [h]))"),
}


@pytest.mark.parametrize("form, use, found", _cases(SAVED_HELD, SAVED_FOUND))
def test_an_update_of_a_saved_tensor_through_another_road_is_declined(tmp_path, form, use, found):
    """Once the arm not taken saved `h`, the update makes backward raise."""
    before, after = use
    body = SAVED.format(before=before, site=SAVED_SITES[form], use=after)
    _tried(tmp_path, body, "block", "autograd saves what they read" if found else None, _signs(2, 3))


# --- printing: debug output of an activation during training -------------------------------------

PRINTED = """
import logging
import pprint


def show(x):
    {site}
{use}
    return y
"""
PRINTED_SITES = {
    "statement": "if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x * 3",
    "expression": "y = x * 2 if x.sum() > 0 else x * 3",
}
PRINTED_HELD = {
    "closure": "    report = lambda: print(y)\n    report()",
    "stdout_write": "    import sys\n    sys.stdout.write(str(y) + '\\n')",
    "f_string_spec": "    print(f'{y!r:>10}')",
    "detached": "    print(y.detach(), y[0])",
    "getattr_shape": "    print(getattr(y, 'shape'))",
    "computed_in_a_list": "    outs = [y * 1, y.sum()]\n    print(outs)",
}
PRINTED_FOUND = {
    "str_format": "    print('activation {}'.format(y))",
    "alias": "    residual = y\n    print(residual)",
    "appended": "    outs = []\n    outs.append(y)\n    print(outs)",
    "list_name": "    outs = [y]\n    print(outs)",
    "dict_call": "    print(dict(h=y))",
    "starred": "    outs = (y,)\n    print(*outs)",
    "getattr_grad_fn": "    print(getattr(y, 'grad_fn'))",
    "format_string_name": "    fmt = 'activation %s'\n    print(fmt % y)",
    "comprehension": "    print([t for t in (y,)])",
    "walrus": "    print(z := y)",
    "unpacked": "    a, b = y, x\n    print(a)",
    "loop": "    for t in (y,):\n        print(t)",
    "assert_message": "    assert y.abs().sum() > 100, y",
    "raise_message": "    if y.abs().sum() < 100:\n        raise ValueError(y)",
    "join": "    print(', '.join(map(str, [y])))",
    "pprint": "    pprint.pprint(y)",
}


# The statement form declines these already: the call is not known to leave its argument unchanged
# (the raise: its `if` is a site of its own, with `raise` in its branch).
PRINTED_DECLINED = {("str_format", "statement"), ("join", "statement"), ("pprint", "statement"),
                    ("raise_message", "statement")}


@pytest.mark.parametrize("form, use, found", _cases(PRINTED_HELD, PRINTED_FOUND, holding=PRINTED_DECLINED))
def test_the_text_of_a_selected_value_through_another_road_is_declined(tmp_path, form, use, found):
    """The text would name `WhereBackward0` where the branch's own grad_fn was."""
    body = PRINTED.format(site=PRINTED_SITES[form], use=use)
    _tried(tmp_path, body, "show", "WhereBackward0" if found else None, _signs(2))


# --- identity: a step that scales its input only when asked, then updates it in place ------------

IDENTITY = """
@torch.no_grad()
def step(x):
{before}
    {site}
{use}
"""
IDENTITY_SITES = {
    "statement": "if x.sum() > 0:\n        y = x * 2\n    else:\n        y = x",
    "expression": "y = x * 2 if x.sum() > 0 else x",
}
IDENTITY_HELD = {
    "copy_into_argument": ("", "    x.copy_(y + 1)\n    return y * 1"),
    "copy_into_select": ("", "    y.copy_(x + 1)\n    return y * 1"),
    "version": ("", "    return y * 1, y._version"),
    "same_storage": ("", "    return y * 1, y.data_ptr() == x.data_ptr()"),
    "is_none": ("", "    missing = y is None\n    return y * 1, missing"),
}
IDENTITY_FOUND = {
    "detach": ("", "    y.detach().add_(1)\n    return y * 1"),
    "foreach": ("", "    torch._foreach_add_([y], 1)\n    return y * 1"),
    "walrus": ("", "    (z := y).add_(1)\n    return y * 1"),
    "getattr": ("", "    getattr(y, 'add_')(1)\n    return y * 1"),
    "closure_called_after": ("    def bump():\n        y.add_(1)", "    bump()\n    return y * 1"),
    "is": ("", "    changed = y is not x\n    return y * 1, changed"),
    "id": ("", "    return y * 1, id(y) == id(x)"),
    "hash": ("", "    same = hash(y) == hash(x)\n    return y * 1, same"),
    "dict_key": ("", "    seen = {y: 1}\n    return y * 1, x in seen"),
    "set_member": ("", "    seen = {y}\n    return y * 1, x in seen"),
}


@pytest.mark.parametrize("form, use, found", _cases(IDENTITY_HELD, IDENTITY_FOUND))
def test_the_callers_tensor_reached_through_another_road_is_declined(tmp_path, form, use, found):
    """The select is a new tensor: the update, or the identity test, would miss the caller's."""
    before, after = use
    body = IDENTITY.format(before=before, site=IDENTITY_SITES[form], use=after)
    _tried(tmp_path, body, "step", "new tensor" if found else None, _signs(2, 3, grad=False))


# --- the same road from other site shapes: an elif chain, nested ifs, a loop ----------------------

SHAPES = {
    "elif_chain": """
def show(x):
    if x.sum() > 8:
        y = x * 2
    elif x.sum() > 0:
        y = x * 3
    else:
        y = x * 4
    hidden = y
    print(hidden)
    return y
""",
    "nested": """
def show(x):
    if x.sum() > 0:
        if x.sum() > 8:
            y = x * 2
        else:
            y = x * 3
    else:
        y = x * 4
    hidden = y
    print(hidden)
    return y
""",
    "loop_collects": """
def show(x):
    outs = []
    for step in range(2):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x * 3
        outs.append(y)
    print(outs)
    return y
""",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_text_of_a_selected_value_from_other_site_shapes(tmp_path, shape):
    assert "WhereBackward0" in _declined(SHAPES[shape])
    _kept(tmp_path, SHAPES[shape], "show", [lambda: (_grad(torch.full((2,), 5.0)),), *_signs(2)])


# --- a nested function defined before the site reads the selected name when it is called after ---

CLOSURES = {
    "prints": ("""
def show(x):
    def report():
        print(y)
    if x.sum() > 0:
        y = x * 2
    else:
        y = x * 3
    report()
    return y
""", "show", "WhereBackward0", _signs(2)),
    "views": ("""
@torch.no_grad()
def merge(scores, cached, fresh):
    flatten = lambda: keys.view(-1)
    if scores.sum() > 0:
        keys = cached * 2
    else:
        keys = fresh * 2
    return flatten()
""", "merge", "depends on the strides", LAYOUT_INPUTS),
}


@pytest.mark.parametrize("case", sorted(CLOSURES))
def test_a_closure_defined_before_the_site_and_called_after_it(tmp_path, case):
    _tried(tmp_path, *CLOSURES[case])


# --- GM402 inside a statement: the select lands in a container, an unpacking, a store, a walrus ---

ESCAPED_TEXT = {
    "appended": "    outs = []\n    outs.append(x * 2 if x.sum() > 0 else x * 3)\n    print(outs)\n    return outs[0]",
    "tuple": "    pair = (x * 2 if x.sum() > 0 else x * 3, x)\n    print(pair)\n    return pair[0]",
    "dict": "    d = {'h': x * 2 if x.sum() > 0 else x * 3}\n    print(d)\n    return d['h']",
    "walrus_in_print": "    print(y := (x * 2 if x.sum() > 0 else x * 3))\n    return y",
    "tuple_in_print": "    print((x * 2 if x.sum() > 0 else x * 3, x))\n    return x * 1",
    "assert_message": "    assert x.sum() > 100, x * 2 if x.sum() > 0 else x * 3\n    return x * 1",
    "for_loop": "    for t in (x * 2 if x.sum() > 0 else x * 3, x):\n        print(t)\n    return x * 1",
}
ESCAPED_TEXT_HELD = {
    "summed": "    print((x * 2 if x.sum() > 0 else x * 3).sum())\n    return x * 1",
    "plus_one": "    y = (x * 2 if x.sum() > 0 else x * 3) + 1\n    print(y)\n    return y",
}
ESCAPED_LAYOUT = {
    "appended": "    outs = []\n    outs.append(cached * 2 if scores.sum() > 0 else fresh * 2)\n    return outs[0].view(-1)",
    "unpacked": "    k, v = (cached * 2 if scores.sum() > 0 else fresh * 2), fresh\n    return k.view(-1)",
    "stored": "    cache = {}\n    cache['k'] = cached * 2 if scores.sum() > 0 else fresh * 2\n    return cache['k'].view(-1)",
}


@pytest.mark.parametrize("use, found", [pytest.param(u, True, id=n) for n, u in ESCAPED_TEXT.items()]
                         + [pytest.param(u, False, id=n) for n, u in ESCAPED_TEXT_HELD.items()])
def test_the_text_of_a_select_made_inside_a_statement(tmp_path, use, found):
    body = f"\ndef show(x):\n{use}\n"
    _tried(tmp_path, body, "show", "WhereBackward0" if found else None, _signs(2))


@pytest.mark.parametrize("use", [pytest.param(u, id=n) for n, u in ESCAPED_LAYOUT.items()])
def test_the_layout_of_a_select_made_inside_a_statement(tmp_path, use):
    body = f"\n@torch.no_grad()\ndef merge(scores, cached, fresh):\n{use}\n"
    assert "depends on the strides of a selected value" in _declined(body)
    _kept(tmp_path, body, "merge", LAYOUT_INPUTS)


# --- GM101's call form: each branch appends its value, so the list holds the select ---------------

APPENDED = {
    "printed": ("""
def show(x):
    outs = []
    if x.sum() > 0:
        outs.append(x * 2)
    else:
        outs.append(x * 3)
    print(outs)
    return outs[0]
""", "show", "WhereBackward0", _signs(2)),
    "viewed": ("""
@torch.no_grad()
def merge(scores, cached, fresh):
    outs = []
    if scores.sum() > 0:
        outs.append(cached * 2)
    else:
        outs.append(fresh * 2)
    return outs[0].view(-1)
""", "merge", "depends on the strides of a selected value", LAYOUT_INPUTS),
}


@pytest.mark.parametrize("case", sorted(APPENDED))
def test_a_select_appended_by_the_call_form(tmp_path, case):
    _tried(tmp_path, *APPENDED[case])


def test_a_name_the_statement_binds_again_stays_rewritten(tmp_path):
    """`h` names the new tensor after the statement: the later update does not reach what the arms saved."""
    body = """
def block(x):
    h = x * 3
    h = (h * 2 if h.sum() > 0 else h.clamp(min=0.0)) + 1
    h.add_(1)
    return h
"""
    text, result = _fix(body, dynamic=True)
    assert result.applied, [d.reason for d in result.declined]
    _kept(tmp_path, body, "block", _signs(2, 3))
