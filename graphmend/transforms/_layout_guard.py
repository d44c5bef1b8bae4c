"""The layout guard of a predicated site (GM101, GM402): ``torch.where`` only on ordinary tensors.

``torch.where(c, a, b)`` computes both values. The rules prove that computing the value not
taken cannot raise or write anything, but only for ordinary (strided, dense, not quantized, not
meta) tensors. A sparse tensor (COO, CSR, BSR …), an mkldnn, nested, quantized or meta one has
kernels for far fewer operations: ``x - 1`` or ``x.clamp(...)`` on sparse COO raise, and
``torch.where`` itself has no sparse kernel. There the value not taken may raise where the
original never computed it. So the rewrite keeps the original statement and runs it whenever
a tensor the site reads is not an ordinary one::

    if _graphmend_strided(x, gate):
        y = torch.where(gate.sum() > 0, x * 2, x - 1)
    elif gate.sum() > 0:
        y = x * 2
    else:
        y = x - 1

(a conditional expression gets ``select(...) if _graphmend_strided(x) else <the original>``).
The check is static under Dynamo: a tensor's layout, device, quantization and nestedness are
part of what its tensor guards already check (the dispatch keys), so on ordinary inputs the
guard folds away: no graph break, no extra graph, no recompilation. Dynamo does not trace sparse
or quantized tensors at all (a frame that receives one runs eagerly), so under torch.compile
they too run the original statement, exactly as before the rewrite. Not covered: an mkldnn
tensor under torch.compile, which Dynamo traces as if it were strided (its layout and
``is_mkldnn`` read as a strided tensor's there), so no check in the program can tell it apart.

The operands are what the site reads: the local names certainly bound before it (parameters,
earlier assignments), free names that may hold a tensor (:class:`Scope`: globals, closure
variables, names bound by ``from m import W``, a closure variable named like a builtin such as
``input``; not modules, functions or classes of the file, torch's names, unshadowed builtins or
names that are only called), and attribute chains (``self.weight``, ``tables.W`` of an imported
module) without the metadata and method at their end (``h.dtype`` checks ``h``, ``x.clamp(...)``
checks ``x``). Lists, tuples and dicts among them are looked into. Each operand is read once more
than before (the guard runs first), so :mod:`_reads` must accept it: a property or an attribute
that may be missing declines the site.
"""

from __future__ import annotations

import builtins
from typing import Callable, Iterable, Optional

import libcst as cst

from graphmend.transforms import _analysis as A
from graphmend.transforms import _reads as R
from graphmend.transforms._attributes import origins
from graphmend.transforms._effects import dotted
from graphmend.transforms.base import iter_nodes

HELPER = "_graphmend_strided"

# Attributes that describe a tensor (or read a view of it) rather than hold another object: the
# guard checks the tensor they are read from. Not ``grad``: a gradient is a tensor of its own, whose
# layout may differ (an Embedding(sparse=True) has a strided weight and a sparse COO gradient).
_TENSOR_ATTRS = frozenset("""
dtype shape device ndim layout is_cuda is_sparse is_quantized is_nested is_meta is_mkldnn
requires_grad grad_fn training T mT H mH real imag data itemsize nbytes
""".split())


def helper_code(torch_name: str) -> str:
    """The module-level helper ``HELPER``, for a module that imports torch as ``torch_name``."""
    return f'''def {HELPER}(*values):
    """Whether every tensor among `values` (and in the lists, tuples and dicts among them) is an
    ordinary strided one, the kind the torch.where form beside it is proven for.

    A sparse, mkldnn, nested, quantized or meta tensor runs the original `if` instead:
    computing the value not taken may raise there (`x - 1` has no sparse COO kernel), and
    torch.where has no sparse kernel; so does a tensor subclass, whose own operators may not
    implement what the value not taken computes. Static under Dynamo (no graph break).
    """
    pending = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, (list, tuple)):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, {torch_name}.Tensor) and (
            type(value) not in ({torch_name}.Tensor, {torch_name}.nn.Parameter)
            or value.layout != {torch_name}.strided
            or value.is_nested
            or value.is_quantized
            or value.device.type == "meta"
        ):
            return False
    return True
'''


class Scope:
    """What the file says about the names a site may read: which are provably not tensors.

    Left out of the guard: functions and classes the module defines, modules bound by
    ``import`` (an attribute chain rooted at one, ``tables.W``, is an operand), the torch names,
    names bound by ``from torch... import``, and builtins that nothing in the file rebinds (a
    closure variable or global named ``input`` is an operand). A name bound by ``from m import
    W`` may be a tensor table: an operand.
    """

    def __init__(self, module: cst.Module, t: "A._Torch"):
        self.defined: set[str] = {s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
        self.modules = R.imported_modules(module)
        self.torch = set(t.torch_names) | set(t.f_names)
        for local, origin in origins(module).items():
            if origin == "torch" or origin.startswith("torch."):
                self.torch.add(local)
        self.bound = _bound_anywhere(module)

    def plain(self, name: str) -> bool:
        """Whether a free name (not the function's own) may hold a tensor."""
        if name in self.defined or name in self.torch or name in self.modules:
            return False
        return name in self.bound or not hasattr(builtins, name)


def _bound_anywhere(module: cst.Module) -> set[str]:
    """Every name some statement of the file binds (parameters, assignments, loop and ``with``
    targets, imports, definitions): a builtin's name among them may be shadowed."""
    found: set[str] = set()
    for node in iter_nodes(module, (cst.Param, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                                    cst.CompFor, cst.AsName, cst.NamedExpr, cst.FunctionDef, cst.ClassDef,
                                    cst.ImportAlias, cst.Global, cst.Nonlocal)):
        if isinstance(node, (cst.Param, cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            found.update(n.name.value for n in node.names)
        elif isinstance(node, cst.ImportAlias):
            found.add((dotted(node.asname.name) if node.asname is not None else dotted(node.name)).split(".")[0])
        else:
            target = {cst.AssignTarget: "target", cst.AnnAssign: "target", cst.AugAssign: "target", cst.For: "target",
                      cst.CompFor: "target", cst.AsName: "name", cst.NamedExpr: "target"}[type(node)]
            found.update(n.value for n in iter_nodes(getattr(node, target), (cst.Name,)))
    return found


def operands(nodes: Iterable[Optional[cst.CSTNode]], local: set[str], bound: Callable[[str], bool],
             scope: Scope) -> list[str]:
    """The expressions (source text, in order of first appearance) whose values the guard checks.

    ``local``: the function's own names (parameters and assigned names); a local one is read only
    when ``bound`` says it is certainly bound before the site (a name the site itself assigns
    first, a hoisted setup, is computed from the others). ``scope``: which free names are
    provably not tensors. A name that is only called (``f(x)``) is not one either: a tensor is
    not callable.
    """
    found: list[str] = []

    def usable(name: str) -> bool:
        if name in local:
            return bound(name)
        return scope.plain(name)

    def add(text: str) -> None:
        if text not in found:
            found.append(text)

    def chain(node: cst.Attribute, callee: bool) -> None:
        cur, attrs = R.chain_of(node)
        if not isinstance(cur, cst.Name):
            walk(cur)  # `(x + 1).T`, `torch.finfo(h.dtype).max`: what the inner value reads
            return
        if callee:
            attrs = attrs[:-1]  # `x.clamp(...)`: the receiver
        keep = next((i for i, a in enumerate(attrs) if a in _TENSOR_ATTRS), len(attrs))
        text = ".".join([cur.value, *attrs[:keep]])
        if cur.value not in local and (cur.value in scope.modules or cur.value in scope.defined):
            # `tables.W` reads a module's (or a class's) attribute; `tables` or `math` alone is no tensor
            if text not in scope.modules and text != cur.value and cur.value not in scope.torch:
                add(text)
        elif usable(cur.value):
            add(text)

    def walk(node: Optional[cst.CSTNode]) -> None:
        if node is None:
            return
        if isinstance(node, cst.Name):
            if usable(node.value):
                add(node.value)
            return
        if isinstance(node, cst.Attribute):
            chain(node, callee=False)
            return
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute):
                chain(node.func, callee=True)
            elif not isinstance(node.func, cst.Name):
                walk(node.func)  # a name that is only called is no tensor
            for arg in node.args:
                walk(arg.value)
            return
        if isinstance(node, cst.Arg):
            walk(node.value)  # a keyword's name is not a read
            return
        if isinstance(node, (cst.AssignTarget,)):
            target = node.target
            if not isinstance(target, cst.Name):  # `self.h[i] = ...` reads self.h
                walk(target)
            return
        if isinstance(node, cst.Assign):
            for target in node.targets:
                walk(target)
            walk(node.value)
            return
        if isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            if not isinstance(node.target, cst.Name) or isinstance(node, cst.AugAssign):
                walk(node.target)
            walk(node.value)
            return
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return  # a scope of its own; the rules decline these in a predicated arm anyway
        for child in node.children:
            walk(child)

    for node in nodes:
        walk(node)
    return found


def call(operand_texts: list[str]) -> str:
    return f"{HELPER}({', '.join(operand_texts)})"


def is_guard(test: cst.BaseExpression) -> bool:
    """Whether a test is (or ends with) a call of ``HELPER``: the head of an earlier fix."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return is_guard(test.right)
    return isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == HELPER
