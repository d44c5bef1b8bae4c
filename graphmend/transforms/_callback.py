"""Code this file cannot read, which may call back into it: judged for lowered checks and deferrals.

``_reach`` proves a lowered check (GM301, GM303) by walking the call chain from the site back to each
entry through the calls of this file. Code it cannot read may be on that chain without a call of this
file showing it: a submodule of another file, a function handed in as an argument, a callable stored
on ``self`` (a ``functools.partial``, a lambda) may import this file (or hold one of its modules) and
call any of its functions, after writing state of its own. The check then runs in the entry's graph
after that write, and a graph that fails loses it.

The rule: a call whose target is code the walk cannot read may call back into ANY function of this
file, after writing any state. So an entry whose region may run such a call anywhere is not clean
(:func:`entry_callback`), whatever the order: the functions of this file its region may run are
found forwards from its ``forward`` (:func:`reach`) and every call of them is judged
(:func:`calls_back`); the reason names the call.

What cannot call back (:func:`calls_back` returns ''):

* what ``_reach`` follows or judges as known: functions and methods of this file, torch's functions
  (outside :data:`HIGHER_ORDER`, which call what they are given), builtins, tensor methods (by
  name) and container methods, in-place updates, the runtime's helpers, numpy and math, output calls
  (``print``, ``logging``, ``warnings``: a graph break or a deferred record, never a callback inside
  the graph); building a class of this file with no ``__init__`` of its own over torch's module or a
  transformers ``ModelOutput``;
* a callee imported from :data:`CALLBACK_FREE` (transformers' helpers read for 4.52.4: they call
  only what they are given, or nothing), and :data:`CALLBACK_FREE_METHODS` of a vetted base;
* a value held where this file shows what is put there (:func:`_held`): ``self.name(...)``,
  ``self.name[i](...)``, ``for part in self.name: part(...)``, a local ``loss = nn.MSELoss()``. What
  it may run is this file's (the forwards of the classes put there: followed by :func:`reach`) or
  torch's. Where this file does not show what is put there (``self.inner = inner``), any function
  of this file may run (:func:`reach` says so) — and the runtime looks, on every call of the
  outermost boundary, at every module under the entry and every callable attribute they hold
  (``_graphmend_hooked``): one of a class or function defined outside the entry's file (torch's
  own and transformers' activations excepted) keeps the check in Python for that call.

A deferred print, log record or warning (GM201-GM203) waits for the boundary; code this analysis
does not read that runs after it in the same region may print at once (its file is not rewritten),
out of order: :func:`unread_after` names it, and the deferral is unsafe.
"""

from __future__ import annotations

import weakref
from typing import Optional

import libcst as cst

from graphmend.transforms._callers import _innermost, _is_super
from graphmend.transforms._effects import CONTAINER_METHODS, code, dotted
from graphmend.transforms.base import children

# torch functions that call a callable they are given (a checkpointed forward, a mapped function).
HIGHER_ORDER = frozenset(("checkpoint", "checkpoint_sequential", "vmap", "cond", "map", "scan", "while_loop", "grad",
                          "vjp", "jvp", "jacrev", "jacfwd", "hessian", "functional_call", "apply", "associative_scan"))
# torch's module containers: what they hold is what their arguments are.
TORCH_CONTAINERS = frozenset(("ModuleList", "Sequential", "ModuleDict"))
# Callables of transformers 4.52.4 (by where they are imported from) that run no code of the file
# that calls them except a function it passes in (followed by ``_reach`` as a use of that function):
# read in their source. The ``modeling_outputs`` classes are dataclasses whose ``__post_init__``
# only stores the fields.
CALLBACK_FREE = frozenset(("transformers.pytorch_utils.apply_chunking_to_forward", "transformers.modeling_outputs.*",
                           "transformers.pytorch_utils.prune_linear_layer",
                           "transformers.pytorch_utils.find_pruneable_heads_and_indices",
                           "transformers.utils.ModelOutput", "transformers.utils.generic.ModelOutput"))
# Methods of transformers' PreTrainedModel (a vetted base) that only compute on their arguments and
# the module's own dtype/config: they call nothing of the subclass's file.
CALLBACK_FREE_METHODS = frozenset(("get_head_mask", "get_extended_attention_mask", "invert_attention_mask"))


# Per parsed file (the nodes found are its own): what callbacks() and reach() found.
_MEMO: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _nodes(program, node: cst.CSTNode, kinds: tuple[type, ...]) -> list:
    """``iter_nodes(node, kinds)``, from a flat list of ``node``'s descendants kept per file."""
    memo = _MEMO.setdefault(program.source, {}).setdefault("nodes", {})
    found = memo.get((id(node), kinds))
    if found is not None:
        return found
    flat = memo.get(id(node))
    if flat is None:
        flat, todo = [], [node]
        while todo:
            cur = todo.pop()
            flat.append(cur)
            todo.extend(reversed(children(cur)))
        memo[id(node)] = flat
    found = memo[(id(node), kinds)] = [n for n in flat if isinstance(n, kinds)]
    return found


def entry_callback(program, start: Optional[cst.FunctionDef]) -> Optional[str]:
    """Why the region an entry starts (its ``forward``, or a compiled function: ``start``) may run
    code of another file that can call back into this one, or None: a call :func:`calls_back`
    reports in a function the entry reaches (:func:`reach`)."""
    if start is None:
        return None
    reached, everything = reach(program, start)
    for g, node, why, inner in callbacks(program):
        if id(g) in reached or (everything and (inner or g.name.value != "__init__")):
            return why
    return None


def callbacks(program) -> list[tuple[cst.FunctionDef, cst.CSTNode, str, bool]]:
    """Every call (or attribute read) in a function of this file that may run code of another file
    able to call back into this one: (the outermost function it is in, the node, why, whether it
    is inside a lambda or a function defined in that one: it may run later, from anywhere)."""
    from graphmend.transforms._boundary import _outermost_function

    source = program.source
    memo = _MEMO.setdefault(source, {})
    if "callbacks" in memo:
        return memo["callbacks"]
    found = memo["callbacks"] = []
    for node in _nodes(program, source.module, (cst.Call, cst.Attribute)):
        fn = _outermost_function(source, node)
        if fn is None:
            continue  # module level: runs on import, not under compile
        why = calls_back(program, node, fn)
        if why:
            inner = _innermost(source, node) is not fn
            found.append((fn, node, f"{why} at line {source.line(node)}", inner))
    return found


def reach(program, start: cst.FunctionDef) -> tuple[set[int], bool]:
    """The functions of this file a region that starts in ``start`` may run (ids), and whether it
    may run any of them: a callable held by an instance that this file does not show
    (``self.inner = inner``), which the runtime allows only when it is of this file (or torch's)."""
    memo = _MEMO.setdefault(program.source, {}).setdefault("reach", {})
    if id(start) in memo:
        return memo[id(start)]
    seen: set[int] = set()
    everything = False
    todo = [start]
    while todo and not everything:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        owner = program.owner.get(id(f))
        for node in _nodes(program, f, (cst.Call, cst.Attribute, cst.Name)):
            if isinstance(node, cst.Name):
                if node.value in program.functions and not _local_binding(program, f, node.value):
                    todo.append(program.functions[node.value])  # a call, or a use as a value
                continue
            if isinstance(node, cst.Call):
                kinds = _held_kinds(program, node, f, owner)
                if kinds is None:
                    everything = True
                    break
                if kinds is not NOT_HELD:
                    todo.extend(kinds)
            targets, _ = program.node_write(node, f)
            todo.extend(targets)
            if isinstance(node, cst.Attribute) and dotted(node.value) == "self" and owner is not None:
                todo.extend(program.dispatch(owner, node.attr.value)[0])  # a method used as a value
    memo[id(start)] = (seen, everything)
    return seen, everything


def _held_kinds(program, call: cst.Call, fn: cst.FunctionDef, owner: Optional[str]):
    """For a call of a value this file shows being held (:func:`_held`: an instance attribute, a
    local bound to such values), the functions of this file it may run (a forward, the method
    called on it); None where what it holds is not shown (the runtime allows only this file's and
    torch's); :data:`NOT_HELD` for any other call."""
    held = _held(program, call, fn, owner)
    if held is None:
        return NOT_HELD
    values, method = held
    if values is None:
        return None
    found: list[cst.FunctionDef] = []
    for value in values:
        kinds = _value_kinds(program, value)
        if kinds is None:
            return None
        for k in kinds:
            targets, unknown = program.dispatch(k, method)
            if unknown and method != "forward" or program.dispatch(k, "forward")[1]:
                return None
            found.extend(targets)
    return found


# A call that is not of a held value (for :func:`_held_kinds`).
NOT_HELD = object()
# Modules whose functions run no Python code of the caller's file (numpy's and math's C code).
CALLBACK_FREE_MODULES = frozenset(("numpy", "math"))
# Tensor methods that run Python code given to them (hooks, autograd, apply_).
_CALLING_TENSOR_METHODS = frozenset(("backward", "register_hook", "register_post_accumulate_grad_hook", "apply_", "map_",
                                     "map2_", "__torch_function__"))


def _tensor_methods() -> frozenset[str]:
    """The public methods of ``torch.Tensor`` that call nothing they are given."""
    global _TENSOR_METHODS
    if _TENSOR_METHODS is None:
        import torch

        _TENSOR_METHODS = frozenset(n for n in dir(torch.Tensor) if not n.startswith("_")) - _CALLING_TENSOR_METHODS
    return _TENSOR_METHODS


_TENSOR_METHODS: Optional[frozenset[str]] = None


def _plain_construction(program, cls: str) -> bool:
    """Whether building ``cls`` runs no code this analysis does not read: no ``__init__``,
    ``__new__`` or ``__post_init__`` of its family here, and every base of another file a torch
    module or one of :data:`CALLBACK_FREE` (a transformers ``ModelOutput``)."""
    for c in program._ancestors(cls):
        if any(program.resolve(c, m) is not None for m in ("__init__", "__new__", "__post_init__")):
            return False
        for b in program.classes[c].bases:
            shown = dotted(b.value)
            if shown in program.classes:
                continue
            origin = _origin(program, shown.split(".")[0])
            if origin is None:
                return False
            origin = origin + shown[len(shown.split(".")[0]):]
            if not (origin in ("torch.nn.Module", "torch.nn.modules.module.Module") or origin in CALLBACK_FREE
                    or origin.rsplit(".", 1)[0] + ".*" in CALLBACK_FREE):
                return False
    return True


def _held_values(program, owner: str, name: str) -> Optional[list[cst.BaseExpression]]:
    """What ``self.name`` is set to in the methods of ``owner``'s family (``self.name = v``,
    ``self.name.append(v)``), or None where it is also set otherwise (``setattr``)."""
    values: list[cst.BaseExpression] = []
    family = program._ancestors(owner) | program.subclasses(owner)
    for c in family:
        body = program.classes[c].body
        for node in _nodes(program, body, (cst.Assign, cst.Call, cst.AnnAssign, cst.AugAssign)):
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    tg = t.target
                    if isinstance(tg, cst.Subscript):
                        tg = tg.value  # self.name[k] = v
                    if isinstance(tg, cst.Attribute) and dotted(tg.value) == "self" and tg.attr.value == name:
                        values.append(node.value)
                    elif any(isinstance(a, cst.Attribute) and dotted(a.value) == "self" and a.attr.value == name
                             for a in _nodes(program, tg, (cst.Attribute,))) and not isinstance(tg, cst.Attribute):
                        return None  # unpacked into it
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                tg = node.target
                if isinstance(tg, cst.Attribute) and dotted(tg.value) == "self" and tg.attr.value == name:
                    if node.value is None:
                        continue
                    values.append(node.value)
            else:
                f = node.func
                if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Attribute) \
                        and dotted(f.value.value) == "self" and f.value.attr.value == name:
                    if f.attr.value in ("append", "insert", "extend", "add_module", "__setitem__", "update"):
                        values.extend(a.value for a in node.args[-1:] if f.attr.value != "add_module" or True)
                if isinstance(f, cst.Name) and f.value == "setattr":
                    return None
                if isinstance(f, cst.Attribute) and dotted(f.value) == "self" and f.attr.value in (
                        "add_module", "register_module") and node.args and _literal(node.args[0].value) in (name, None):
                    values.extend(a.value for a in node.args[1:2])
    return values


def _literal(node: cst.BaseExpression) -> Optional[str]:
    value = node.evaluated_value if isinstance(node, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _value_kinds(program, value: cst.BaseExpression) -> Optional[list[str]]:
    """The classes of this file a value set on an instance may hold modules of ([] for torch's
    modules and functions, transformers' activations, None, literals); None where it is not shown."""
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) or (isinstance(value, cst.Name)
                                                                        and value.value in ("None", "True", "False")):
        return []
    if isinstance(value, cst.IfExp):
        a, b = _value_kinds(program, value.body), _value_kinds(program, value.orelse)
        return None if a is None or b is None else a + b
    if isinstance(value, (cst.List, cst.Tuple)):
        found: list[str] = []
        for e in value.elements:
            k = None if isinstance(e, cst.StarredElement) else _value_kinds(program, e.value)
            if k is None:
                return None
            found += k
        return found
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
        return _value_kinds(program, value.elt)
    if isinstance(value, cst.Call):
        callee = dotted(value.func)
        if _free_import(program, value.func):
            return []  # a vetted helper's result: a tensor, a torch module, an output object
        if callee in program.classes:
            if program.resolve(callee, "__call__") is not None or program.attributes.foreign_call(callee) is not None:
                return None
            return [callee]
        if _torch_value(program, value.func):
            if dotted(value.func).split(".")[-1] not in TORCH_CONTAINERS:
                return []  # a torch module built from values
            found = []  # a container: its arguments are the modules it holds
            for a in value.args:
                k = _value_kinds(program, a.value)
                if k is None:
                    return None
                found += k
            return found
        return None
    if isinstance(value, (cst.Name, cst.Attribute)) and _torch_value(program, value):
        return []
    return None


def _torch_value(program, node: cst.CSTNode) -> bool:
    """Whether ``node`` names something of torch (``nn.Linear``, ``nn.functional.relu``) or of
    transformers' activations (the runtime allows both)."""
    d = dotted(node)
    if not d:
        return False
    head = d.split(".")[0]
    kind, _ = program.t.func(node) if isinstance(node, cst.Attribute) else ("other", d)
    if kind in ("torch", "F") or head in program.t.torch_names:
        return True
    origin = _origin(program, head)
    return origin is not None and head not in program.defined and (
        origin == "torch" or origin.startswith("torch.") or origin.startswith("transformers.activations"))


def _held(program, call: cst.Call, fn: cst.FunctionDef, owner: Optional[str]):
    """``(values, method)`` when ``call`` calls a value held where this file shows what is put
    there — ``self.name(...)``, ``self.name[i](...)``, ``self.name.method(...)``, ``part(...)`` for
    ``part`` of ``for part in self.name``, for an instance attribute this file assigns
    (:func:`_instance_callable`), or ``f(...)`` for a local ``f`` every binding of which is
    ``f = <value>``: the values (None: also set otherwise) and the method called ('forward' for a
    call of the value itself); else None."""
    func = call.func
    method = "forward"
    if isinstance(func, cst.Attribute):
        receiver = func.value.value if isinstance(func.value, cst.Subscript) else func.value
        if isinstance(receiver, cst.Attribute) and dotted(receiver.value) == "self" and owner is not None \
                and _instance_callable(program, owner, receiver.attr.value):
            return _held_values(program, owner, receiver.attr.value), func.attr.value
    if isinstance(func, cst.Subscript):
        func = func.value
    if isinstance(func, cst.Attribute) and dotted(func.value) == "self":
        if owner is not None and _instance_callable(program, owner, func.attr.value):
            return _held_values(program, owner, func.attr.value), method
        return None
    if isinstance(func, cst.Name):
        name = _iterated(program, fn, func.value)
        if name is not None and owner is not None and _instance_callable(program, owner, name):
            return _held_values(program, owner, name), method
        values = _local_values(program, fn, func.value)
        if values is not None:
            return values, method
    return None


def _local_values(program, fn: cst.FunctionDef, name: str) -> Optional[list[cst.BaseExpression]]:
    """The values of a local every binding of which is ``name = <value>`` (None: a parameter,
    another binding, or none)."""
    if any(p.name.value == name for p in _nodes(program, fn.params, (cst.Param,))):
        return None
    values = []
    for node in _nodes(program, fn.body, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.With,
                                     cst.NamedExpr, cst.FunctionDef, cst.ClassDef, cst.Global, cst.Nonlocal)):
        if isinstance(node, cst.Assign):
            for t in node.targets:
                if isinstance(t.target, cst.Name) and t.target.value == name:
                    values.append(node.value)
                elif name in {n.value for n in _nodes(program, t.target, (cst.Name,))}:
                    return None
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            if node.name.value == name:
                return None
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            if any(n.name.value == name for n in node.names):
                return None
        else:
            target = getattr(node, "target", None)
            parts = ([target] if target is not None else []) + [i.asname for i in getattr(node, "items", ()) if i.asname]
            if any(name in {n.value for n in _nodes(program, p, (cst.Name,))} for p in parts):
                return None
    return values or None


def _iterated(program, fn: cst.FunctionDef, name: str) -> Optional[str]:
    """``attr`` where every binding of ``name`` in ``fn`` is ``for name in self.attr`` (or
    ``for i, name in enumerate(self.attr)``, in a statement or a comprehension), else None."""
    found: set[str] = set()
    for node in _nodes(program, fn, (cst.For, cst.CompFor, cst.AssignTarget, cst.AugAssign, cst.NamedExpr, cst.Param,
                                cst.With, cst.FunctionDef, cst.Lambda)):
        if isinstance(node, (cst.For, cst.CompFor)):
            target, it = node.target, node.iter
            if isinstance(target, cst.Tuple) and isinstance(it, cst.Call) and dotted(it.func) == "enumerate" \
                    and len(target.elements) == 2 and it.args:
                target, it = target.elements[1].value, it.args[0].value
            if isinstance(target, cst.Name) and target.value == name:
                if isinstance(it, cst.Attribute) and dotted(it.value) == "self":
                    found.add(it.attr.value)
                    continue
                return None
            if name in {n.value for n in _nodes(program, target, (cst.Name,))}:
                return None
        elif isinstance(node, cst.Param):
            if node.name.value == name:
                return None
        elif isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        else:
            target = getattr(node, "target", None)
            items = getattr(node, "items", ())
            parts = ([target] if target is not None else []) + [i.asname for i in items if i.asname is not None]
            if any(name in {n.value for n in _nodes(program, p, (cst.Name,))} for p in parts):
                return None
    return found.pop() if len(found) == 1 else None


def _local_binding(program, fn: cst.FunctionDef, name: str) -> bool:
    """Whether ``name`` is bound in ``fn`` (a parameter, an assignment): not the module's function."""
    if any(p.name.value == name for p in _nodes(program, fn.params, (cst.Param,))):
        return True
    return any(name in {n.value for n in _nodes(program, t.target, (cst.Name,))}
               for t in _nodes(program, fn.body, (cst.AssignTarget, cst.AugAssign, cst.For, cst.NamedExpr)))


def calls_back(program, node: cst.CSTNode, fn: cst.FunctionDef) -> str:
    """Why ``node`` in ``fn`` may run code this analysis cannot read, which may call back into this
    file ('' if it cannot)."""
    owner = program.owner.get(id(fn))
    if isinstance(node, cst.Attribute):
        parent = program.source.parent(node)
        if (isinstance(parent, cst.Call) and parent.func is node) or isinstance(parent, (cst.AssignTarget, cst.AugAssign)):
            return ""  # a call or a store: judged as such
        reads = _MEMO.setdefault(program.source, {}).setdefault("reads", {})
        key = (owner, code(node.value) if dotted(node.value) in ("self", "") or dotted(node.value).startswith("self.")
               else id(node), node.attr.value)
        if key not in reads:
            _, why = program.attribute_read(node, owner)
            reads[key] = f"{why} (code of another file, which may call back into this file)" if why else ""
        return reads[key]
    assert isinstance(node, cst.Call)
    func = node.func
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Name) and func.func.value == "_graphmend_deferred":
        return ""  # a record
    if isinstance(func, cst.Attribute) and func.attr.value == "__init__" and not _is_super(func.value):
        return f"`{code(node)}` runs an __init__ outside the construction of its object"
    if isinstance(func, cst.Name) and func.value in program.classes:
        if _plain_construction(program, func.value):
            return ""
        return (f"`{code(node)}` builds a {func.value}, whose __init__ (and its bases') may run code this analysis does "
                "not read, which may call back into this file after writing state")
    if _local_function(program, func, fn) or _free_import(program, func):
        return ""
    if isinstance(func, cst.Attribute) and dotted(func.value) == "self" and owner is not None \
            and func.attr.value in CALLBACK_FREE_METHODS and _vetted_bases(program, owner):
        return ""
    if _held_kinds(program, node, fn, owner) is not NOT_HELD:
        return ""  # what the instance (or a local) holds: judged by reach(), and at run time
    kind, name = program.t.func(func)
    root = dotted(func).split(".")[0]
    origin = _origin(program, root) or ""
    if kind in ("torch", "F") or origin == "torch" or origin.startswith("torch."):
        return f"`{code(node)}` calls {name}(), which calls what it is given" if name in HIGHER_ORDER else ""
    if origin.split(".")[0] in CALLBACK_FREE_MODULES and root not in program.defined:
        return ""
    if isinstance(func, cst.Attribute) and dotted(func.value) != "self" and not _is_super(func.value) \
            and name in _tensor_methods():
        return ""  # a tensor's method (the name is one): torch's code
    _, why = program.callees(node, owner)
    if not why:
        return ""
    if isinstance(func, cst.Attribute) and dotted(func.value) != "self" and not _is_super(func.value):
        if name.endswith("_") and not name.endswith("__") or name in CONTAINER_METHODS:
            return ""  # an in-place tensor update or a container's own method: no code of another file
        if any(a.keyword is not None and a.keyword.value in ("out", "inplace") for a in node.args) \
                and "not known to leave" not in why:
            return ""
    return f"{why}; it may run code this analysis does not read, which may call back into this file after writing state"


def _local_function(program, func: cst.CSTNode, fn: cst.FunctionDef) -> bool:
    """Whether ``func`` names a function defined inside ``fn`` (its calls are read as ``fn``'s)."""
    if not isinstance(func, cst.Name):
        return False
    defs = [d for d in _nodes(program, fn.body, (cst.FunctionDef,)) if d.name.value == func.value]
    if not defs:
        return False
    # no other binding of the name in fn (a parameter, an assignment) may shadow the definition
    params = {p.name.value for p in _nodes(program, fn.params, (cst.Param,))}
    bound = {n.value for t in _nodes(program, fn.body, (cst.AssignTarget, cst.AugAssign, cst.For, cst.NamedExpr))
             for n in _nodes(program, t.target, (cst.Name,))}
    return func.value not in params and func.value not in bound


def _origin(program, name: str) -> Optional[str]:
    """What an imported top-level name names, as transformers' absolute path where it is a
    relative import inside a ``transformers`` package."""
    origin = program.attributes.origins.get(name)
    if origin is None:
        return None
    if origin.startswith(".") and "transformers" in program.source.path.replace("\\", "/").split("/")[:-1]:
        origin = "transformers." + origin.lstrip(".")
    return origin


def _free_import(program, func: cst.CSTNode) -> bool:
    """Whether ``func`` is a name imported from :data:`CALLBACK_FREE` (not rebound in the file)."""
    if not isinstance(func, cst.Name) or func.value in program.defined:
        return False
    origin = _origin(program, func.value)
    if origin is None:
        return False
    return origin in CALLBACK_FREE or origin.rsplit(".", 1)[0] + ".*" in CALLBACK_FREE


def _vetted_bases(program, owner: str) -> bool:
    """Whether every base of ``owner``'s family defined elsewhere is vetted (torch's modules,
    transformers' PreTrainedModel and the others ``_attributes`` knows)."""
    return all(risky is not None for _, risky in program.attributes.foreign(owner))


def _instance_callable(program, owner: str, name: str) -> bool:
    """Whether ``self.name`` in ``owner``'s methods is an instance attribute this file assigns that
    no class of the family (here) defines, under bases that are all vetted: what it holds is looked
    at by the runtime on every call of the outermost boundary."""
    family = program._ancestors(owner) | program.subclasses(owner)
    for c in family:
        if program.resolve(c, name) is not None:
            return False
        body = program.classes[c].body
        for stmt in body.body if isinstance(body, cst.IndentedBlock) else ():
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
            if isinstance(small, (cst.Assign, cst.AnnAssign)) and name in {
                    n.value for t in (small.targets if isinstance(small, cst.Assign) else [small])
                    for n in _nodes(program, t.target, (cst.Name,))}:
                return False  # a class attribute: not an instance's
    if not _vetted_bases(program, owner):
        return False
    for c in family:
        for t in _nodes(program, program.classes[c].body, (cst.AssignTarget, cst.AnnAssign)):
            if isinstance(t.target, cst.Attribute) and dotted(t.target.value) == "self" and t.target.attr.value == name:
                return True
    return False


def unread_after(source, call: cst.Call) -> Optional[str]:
    """Why a function handed to ``call``'s function as an argument may run after ``call`` (in its
    function, or anywhere in a loop around both), in the same compiled region, or None. That code
    (``fn(y)`` for a parameter ``fn``) is another file's as often as not, and it may print, log or
    write to a stream at once (its file is not rewritten), ahead of a deferred output that ran
    before it.

    Only a parameter is judged so: other code this analysis does not read (another file's function,
    a callable an instance holds) is as common after a deferred warning in real models as
    ``self.embed_tokens(ids)`` (``set_input_embeddings`` may put anything there), and judging it
    the same way would leave most deferrals unsafe; see the notes of ``_deferral``."""
    from graphmend.transforms._boundary import _outermost_function
    from graphmend.transforms._region import _same_loop
    from graphmend.transforms._reach import _Program

    fn = _outermost_function(source, call)
    if fn is None:
        return None
    program = _Program(source)
    params = {p.name.value for p in _nodes(program, fn.params, (cst.Param,))}
    end = source.positions[call].end
    inside = {id(n) for n in _nodes(program, call, (cst.Call,))}
    for node in _nodes(program, fn, (cst.Call,)):
        start = source.positions[node].start
        if id(node) in inside or ((start.line, start.column) < (end.line, end.column)
                                  and not _same_loop(source, node, call, fn)):
            continue
        if isinstance(node.func, cst.Name) and node.func.value in params and _local_values(program, fn, node.func.value) is None:
            return (f"`{code(node)}` at line {source.line(node)} calls `{node.func.value}`, a function handed in as an "
                    "argument")
    return None
