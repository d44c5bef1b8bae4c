"""What a call changes besides its outputs: its inputs (written in place) and module state.

Runs in the verify worker, next to the user's code. A rewrite that stops writing an argument in
place, drops ``self.calls += 1`` or leaves a buffer unwritten when the graph raises returns the
same outputs and prints the same text; only these observations tell it apart.

- *inputs*: after the call, every input tensor is compared with the value it was called with;
  one that differs was written in place and its new value is kept. Plain values inside
  argument lists and dicts (an appended item, a replaced key) are kept when they differ.
- *state*: parameters, buffers and the plain attributes of every submodule (tensors, numbers,
  strings, booleans, None). A tensor counts as changed when it is another object or its
  version counter moved (an in-place write, also one that stores equal values); a plain value
  when it differs. Changed tensors are kept, plain values go to JSON.

- *identity*: for every output tensor, whether it IS one of the call's input tensors or the
  module's parameters/buffers/tensor attributes (the same object), shares storage with one (a
  view), or is the same object as an earlier output; a fresh tensor of equal values is not the
  caller's object (``out is x`` and a later in-place write tell them apart without gradients).

``snapshot``/``restore`` put a module back as it was, so a case can be run twice from the same
state (the original's own nondeterminism).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

PLAIN = (bool, int, float, str, type(None))


def flatten(value: Any, prefix: str = "out", facts: Any = None) -> list[tuple[str, Any]]:
    """(path, leaf) pairs for tensors and plain values inside tuples, dicts, dataclasses.

    Hugging Face ``ModelOutput`` is an ``OrderedDict`` subclass whose ``None`` fields are
    absent from ``items()``, so it flattens like the dict it is.

    A call's outputs (``prefix`` "out", or ``facts=True``) also carry what a caller can see of
    each tensor besides its values, as plain values compared like any other: ``PATH.type``
    when it is not a plain ``torch.Tensor`` (an ``nn.Parameter`` the original returned itself),
    and ``PATH.autograd`` when it requires grad: "leaf" (an input or parameter handed back
    itself) or "computed". A rewrite whose output requires grad where the original's did not
    (``torch.where`` over an arm that does), or that returns a new tensor where the original
    returned the caller's own, differs there even when every value is equal. ``PATH.strides``
    when it is not contiguous: a caller's ``.view()`` works on one layout and raises on the
    other (``torch.where`` returns a contiguous tensor where a branch returned a transpose).
    """
    import torch

    if facts is None:
        facts = prefix == "out"
    if isinstance(value, torch.Tensor):
        leaves: list[tuple[str, Any]] = [(prefix, value)]
        if facts:
            if type(value) is not torch.Tensor:
                leaves.append((f"{prefix}.type", f"{type(value).__module__}.{type(value).__qualname__}"))
            if value.requires_grad:
                leaves.append((f"{prefix}.autograd", "leaf" if value.is_leaf else "computed"))
            if value.layout != torch.strided:  # compared by its dense values (``portable``) and this
                leaves.append((f"{prefix}.layout", str(value.layout)))
            elif not value.is_contiguous():
                leaves.append((f"{prefix}.strides", strides(value)))
        return leaves
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for key, item in value.items():
            out.extend(flatten(item, f"{prefix}[{key!r}]", facts))
        return out
    if isinstance(value, (tuple, list)):
        out = []
        for i, item in enumerate(value):
            out.extend(flatten(item, f"{prefix}[{i}]", facts))
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = []
        for f in dataclasses.fields(value):
            out.extend(flatten(getattr(value, f.name), f"{prefix}.{f.name}", facts))
        return out
    if value is None or isinstance(value, (bool, int, float, str)):
        return [(prefix, value)]
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return [(prefix, str(value))]
    # Anything else is compared by its type only: its repr usually carries an address.
    return [(prefix, f"<{type(value).__module__}.{type(value).__qualname__}>")]


def strides(t: Any) -> str:
    """A tensor's layout as a caller sees it: its strides, with "-" for a dimension of size 0 or
    1 (its stride is arbitrary: ``.view`` and ``.is_contiguous`` ignore it)."""
    return "(" + ", ".join(str(st) if n > 1 else "-" for n, st in zip(t.shape, t.stride())) + ")"


def state_owner(fn: Any) -> Any:
    """The module whose state a target's call may change: the target itself, or the module a
    bound method belongs to; None for a plain function."""
    import torch

    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def state_items(module: Any) -> dict[str, Any]:
    """Everything a call may change on ``module``: "name" -> tensor or plain value."""
    import torch

    items: dict[str, Any] = {}
    for mod_name, mod in module.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        for name, value in vars(mod).items():
            if isinstance(value, torch.Tensor) or isinstance(value, PLAIN):
                items[prefix + name] = value
            elif isinstance(value, (list, tuple, dict)) and not name.startswith("_"):
                _container_items(prefix + name, value, items, torch.Tensor)
        for store in ("_parameters", "_buffers"):
            for name, value in getattr(mod, store, {}).items():
                if value is not None:
                    items[prefix + name] = value
    return items


CONTAINER_ITEMS = 64  # of a list/tuple/dict attribute (a key/value cache), and two levels deep


def _container_items(name: str, value: Any, items: dict[str, Any], tensor: type, depth: int = 0) -> None:
    """The tensors and plain values kept in a container attribute, as ``name[0]``, ``name['k']``:
    state a call may update in place or hand out as its result. Bounded in count and depth."""
    pairs = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    for key, item in pairs[:CONTAINER_ITEMS]:
        if not isinstance(key, (str, int)):
            continue
        path = f"{name}[{key!r}]"
        if isinstance(item, tensor) or isinstance(item, PLAIN):
            items[path] = item
        elif isinstance(item, (list, tuple, dict)) and depth < 1:
            _container_items(path, item, items, tensor, depth + 1)


def _signature(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version)
    return ("value", type(value).__name__, value)


def state_signature(module: Any) -> dict[str, Any]:
    """A cheap fingerprint of the state (no copies): object identity and version per tensor."""
    return {k: _signature(v) for k, v in state_items(module).items()}


def changed_state(module: Any, before: dict[str, Any], keep: Callable[[str, Any], None]) -> dict[str, dict[str, Any]]:
    """What changed since ``before`` (a ``state_signature``): "name" -> {"tensor": True} (the
    tensor is handed to ``keep``; with its "strides" when it is not contiguous), {"value": v} or
    {"removed": True}."""
    import torch

    now = state_items(module)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(now) | set(before)):
        if name not in now:
            out[name] = {"removed": True}
            continue
        value = now[name]
        if before.get(name) == _signature(value):
            continue
        if isinstance(value, PLAIN):
            out[name] = {"value": value}
        else:
            out[name] = {"tensor": True}
            if value.layout == torch.strided and not value.is_contiguous():  # as an output's (``flatten``)
                out[name]["strides"] = strides(value)
            keep(name, value)
    return out


def portable(value: Any) -> Any:
    """A CPU copy of a tensor that the parent can load and compare: dense (a sparse tensor's
    layout is compared as a fact of its own, see ``flatten``), contiguous."""
    import torch

    value = value.detach().to("cpu")
    if value.layout != torch.strided:
        value = value.to_dense()
    return value.clone().contiguous()


def _same_tensor(a: Any, b: Any) -> bool:
    import torch

    if a.layout != b.layout:
        return False
    if a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a, b) or ((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


def _storage(value: Any) -> Any:
    """The address of a tensor's storage, or None (sparse and other layouts without one, no elements)."""
    try:
        storage = value.untyped_storage()
        return storage.data_ptr() if storage.nbytes() else None
    except (RuntimeError, NotImplementedError):
        return None


def output_identity(output: Any, inputs: tuple[tuple, dict], owner: Any = None) -> dict[str, str]:
    """"PATH.alias" -> what an output tensor is besides its values: "is args[0]" (the caller's
    own tensor, or a parameter/buffer as "is state:fc.weight", or "is out[0]" for an output
    returned twice), "shares storage with args[0]" (a view), absent for a fresh tensor.

    Compared like any other plain value, so a rewrite that returns a copy where the original
    returned the caller's tensor (or a view where it returned a copy) differs there."""
    import torch

    known: list[tuple[str, Any]] = [(p, v) for p, v in flatten(inputs[0], "args", False) + flatten(inputs[1], "kwargs", False)
                                    if isinstance(v, torch.Tensor)]
    if owner is not None:
        known += [(f"state:{k}", v) for k, v in sorted(state_items(owner).items()) if isinstance(v, torch.Tensor)]
    out: dict[str, str] = {}
    for path, leaf in flatten(output, "out", False):
        if not isinstance(leaf, torch.Tensor):
            continue
        same = next((p for p, v in known if v is leaf), None)
        if same is None:
            ptr = _storage(leaf)
            shared = next((p for p, v in known if ptr is not None and _storage(v) == ptr), None)
            if shared is not None:
                out[f"{path}.alias"] = f"shares storage with {shared}"
        else:
            out[f"{path}.alias"] = f"is {same}"
        known.append((path, leaf))
    return out


def written_inputs(original: tuple[tuple, dict], called: tuple[tuple, dict], keep: Callable[[str, Any], None]) -> dict[str, dict[str, Any]]:
    """The inputs the call wrote: "args[0]" -> {"tensor": True} (handed to ``keep``), or
    {"value": v} / {"removed": True} for plain values in argument containers."""
    import torch

    ref = dict(flatten(original[0], "args") + flatten(original[1], "kwargs"))
    now = dict(flatten(called[0], "args") + flatten(called[1], "kwargs"))
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(set(ref) | set(now)):
        if path not in now:
            out[path] = {"removed": True}
            continue
        value, old = now[path], ref.get(path)
        if isinstance(value, torch.Tensor):
            if isinstance(old, torch.Tensor) and _same_tensor(value.detach(), old.detach()):
                continue
            out[path] = {"tensor": True}
            keep(path, value)
        elif path not in ref or type(old) is not type(value) or old != value:
            out[path] = {"value": value}
    return out


def snapshot(module: Any) -> dict[str, Any]:
    """Copies of the state, for ``restore``; a module's own ``torch.Generator`` is put back too
    (its draws are the program's state, not the original's nondeterminism)."""
    import torch

    saved: dict[str, Any] = {k: (v, v.detach().clone()) if isinstance(v, torch.Tensor) else (None, v)
                             for k, v in state_items(module).items()}
    saved[_GENERATORS] = [(g, g.get_state()) for mod in module.modules() for g in vars(mod).values()
                          if isinstance(g, torch.Generator)]
    return saved


_GENERATORS = "\0generators"


def restore(module: Any, saved: dict[str, Any]) -> None:
    """Put ``module`` back to ``saved``: the same tensor objects get their values back; plain
    attributes and replaced tensors are set again; attributes added since are removed."""
    import torch

    mods = dict(module.named_modules())
    saved = dict(saved)
    for generator, state in saved.pop(_GENERATORS, []):
        generator.set_state(state)

    def owner(name: str) -> tuple[Any, str]:
        path, _, attr = name.rpartition(".")
        return mods[path], attr

    for name in set(state_items(module)) - set(saved):
        mod, attr = owner(name)
        try:
            delattr(mod, attr)
        except AttributeError:
            pass
    with torch.no_grad():
        for name, (obj, value) in saved.items():
            mod, attr = owner(name)
            if obj is not None:
                if obj.shape == value.shape:
                    obj.copy_(value)  # one that shrank or grew in place is put back below
                else:
                    obj.set_(value.clone())
                if getattr(mod, attr, None) is not obj:
                    if attr in mod._parameters:
                        mod._parameters[attr] = obj
                    elif attr in mod._buffers:
                        mod._buffers[attr] = obj
                    else:
                        setattr(mod, attr, obj)
            else:
                setattr(mod, attr, value)
