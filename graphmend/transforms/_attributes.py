"""What reading an attribute may run: the code a plain ``obj.name`` executes without a call.

A property getter (``@property``, ``name = property(f)``, ``cached_property``, any descriptor
object put in a class body) runs when the attribute is read, and so do ``__getattr__`` and
``__getattribute__``; a read by name (``getattr(self, "scale")``, ``hasattr``,
``operator.attrgetter``) is the same read. ``_reach`` uses this module to count such reads as
code it cannot follow before a lowered check:

* **this file**: a read of a name that a class of the file binds to a plain ``property`` runs its
  getter, which is followed like a call (on any object: every getter of that name); a name bound
  to any other descriptor (``cached_property``, an object of unknown type), or a name computed at
  run time while the file defines descriptors, cannot be followed (:meth:`Attributes.here`); a
  class of the file with ``__getattr__``/``__getattribute__`` blocks the file
  (:meth:`Attributes.unfollowed`);
* **other files**: ``self.name`` read in a class whose bases (in any file) are not all vetted
  (:data:`TORCH_BASES`, :data:`FOREIGN_BASES`) may run a getter of another file — unless ``name``
  is provably plain: assigned as ``self.name = ...`` (or registered as a buffer, parameter or
  submodule) in a method of the class's family in this file, or a method or plain value of its
  class body here (:meth:`Attributes.read`).

A base that cannot be resolved (a name this file neither defines nor imports) is unknown.
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from graphmend.transforms._effects import dotted
from graphmend.transforms.base import SourceFile, iter_nodes

# torch.nn classes (``torch.nn.<name>``) whose attribute reads run nothing but nn.Module's own
# ``__getattr__`` (parameters, buffers, submodules: it writes nothing): no property or other
# descriptor and no ``__call__``/``__getattr__``/``__getattribute__`` of their own besides
# nn.Module's (each checked against torch by the tests).
TORCH_BASES = frozenset("""
Module Sequential ModuleList ModuleDict Linear Bilinear Identity Embedding EmbeddingBag Conv1d Conv2d Conv3d
ConvTranspose1d ConvTranspose2d ConvTranspose3d LayerNorm GroupNorm RMSNorm BatchNorm1d BatchNorm2d BatchNorm3d
Dropout Dropout1d Dropout2d Dropout3d ReLU GELU SiLU Tanh Sigmoid Softmax MultiheadAttention
""".split())
# Bases of other libraries whose attributes are known, as ``origin -> names``: the names whose
# getter may write state (or read an attribute named at run time); any other name is a plain
# attribute, a method, or a getter that only reads (each read against the installed class by the
# tests). Vetted for transformers 4.52.4, by where they are imported from.
FOREIGN_BASES: dict[str, frozenset[str]] = {
    # loss_function may log (warning_once); base_model and supports_{tp,pp}_plan read
    # getattr(self, self.base_model_prefix); is_gradient_checkpointing reads every submodule's
    # attribute. device, dtype, dummy_inputs, framework, tp_size only read.
    "transformers.modeling_utils.PreTrainedModel": frozenset(
        ("loss_function", "base_model", "supports_tp_plan", "supports_pp_plan", "is_gradient_checkpointing")),
    "transformers.generation.utils.GenerationMixin": frozenset(),  # methods only
    # its __call__ runs nn.Module's (or checkpoints it when training with checkpointing on)
    "transformers.modeling_layers.GradientCheckpointingLayer": frozenset(("_gradient_checkpointing_func",)),
}
# Where transformers re-exports the vetted classes (``from transformers import PreTrainedModel``).
_REEXPORTED = {"transformers." + o.rsplit(".", 1)[1]: o for o in FOREIGN_BASES}
# A relative import inside transformers' own package (``from ...modeling_utils import X``).
_RELATIVE = re.compile(r"^\.+(modeling_utils|generation\.utils|generation|modeling_layers)\.(\w+)$")
PROPERTY_DECORATORS = frozenset(("property", "cached_property", "setter", "getter", "deleter"))
# Builtins that read an attribute by name (the getter runs), and the ones that write it.
NAMED_READS = frozenset(("getattr", "hasattr"))
# What nn.Module's own __init__ sets on every module.
MODULE_ATTRIBUTES = frozenset(("training",))
# Methods that register a submodule, parameter or buffer under a literal name (a plain read after).
REGISTERS = frozenset(("register_buffer", "register_parameter", "add_module", "register_module"))


def origins(module: cst.Module) -> dict[str, str]:
    """Each name the module's top-level imports bind -> what it names, dotted (``nn`` ->
    ``torch.nn``); a relative import keeps its leading dots (``...modeling_utils.PreTrainedModel``)."""
    found: dict[str, str] = {}
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                for a in small.names:
                    full = dotted(a.name)
                    if a.asname is not None:
                        found[dotted(a.asname.name)] = full
                    else:
                        found[full.split(".")[0]] = full.split(".")[0]
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                base = "." * len(small.relative) + (dotted(small.module) if small.module is not None else "")
                for a in small.names:
                    name = dotted(a.name)
                    local = dotted(a.asname.name) if a.asname is not None else name
                    found[local] = base + name if base.endswith(".") else f"{base}.{name}"
    return found


def _vetted(origin: str, path: str) -> Optional[frozenset[str]]:
    """The names of a vetted base that may run code when read (empty: none), or None (unknown).
    A relative import names transformers' class only in a file of a ``transformers`` package."""
    if origin.startswith("torch.nn.") and origin.count(".") == 2 and origin.rsplit(".", 1)[1] in TORCH_BASES:
        return frozenset()
    relative = _RELATIVE.match(origin)
    if relative is not None and "transformers" in path.replace("\\", "/").split("/")[:-1]:
        origin = "transformers." + relative.group(1) + "." + relative.group(2)
    origin = _REEXPORTED.get(origin, origin)
    if origin == "transformers.generation.GenerationMixin":
        origin = "transformers.generation.utils.GenerationMixin"
    return FOREIGN_BASES.get(origin)


def _literal(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _plain_value(value: cst.BaseExpression, defined: frozenset[str]) -> bool:
    """Whether a class-body value is certainly no descriptor with code: a literal, a container of
    them, a lambda, a class or function of this file."""
    if isinstance(value, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                          cst.FormattedString, cst.Lambda)):
        return True
    if isinstance(value, cst.Name):
        return value.value in ("True", "False", "None") or value.value in defined
    if isinstance(value, cst.UnaryOperation):
        return _plain_value(value.expression, defined)
    if isinstance(value, (cst.Tuple, cst.List, cst.Set)):
        return all(not isinstance(e, cst.StarredElement) and _plain_value(e.value, defined) for e in value.elements)
    if isinstance(value, cst.Dict):
        return all(isinstance(e, cst.DictElement) and _plain_value(e.key, defined) and _plain_value(e.value, defined)
                   for e in value.elements)
    return False


class Attributes:
    """The attribute reads of one file that may run code no call shows."""

    def __init__(self, source: SourceFile, classes: dict[str, cst.ClassDef], defined: frozenset[str]):
        self.source = source
        self.classes = classes
        self.defined = defined
        self.origins = origins(source.module)
        self._descriptors: Optional[dict[str, cst.CSTNode]] = None
        self._getters: dict[str, Optional[list[cst.FunctionDef]]] = {}
        self._foreign: dict[str, list[tuple[str, Optional[frozenset[str]]]]] = {}

    # -- this file ----------------------------------------------------------------------------

    def descriptors(self) -> dict[str, cst.CSTNode]:
        """Names a class of this file may bind to a descriptor whose reads run code -> where."""
        if self._descriptors is not None:
            return self._descriptors
        found: dict[str, cst.CSTNode] = {}
        self._descriptors = found
        for fn in iter_nodes(self.source.module, (cst.FunctionDef,)):
            for d in fn.decorators:
                name = dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                if name.split(".")[-1] in PROPERTY_DECORATORS:
                    found.setdefault(fn.name.value, fn)
        for cls in iter_nodes(self.source.module, (cst.ClassDef,)):
            for stmt in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
                for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Assign):
                        targets = [t.target for t in small.targets]
                    elif isinstance(small, cst.AnnAssign) and small.value is not None:
                        targets = [small.target]
                    else:
                        continue
                    if _plain_value(small.value, self.defined):  # type: ignore[arg-type]
                        continue
                    for target in targets:
                        for n in iter_nodes(target, (cst.Name,)):
                            found.setdefault(n.value, small)
        return found

    def getters(self, name: str) -> Optional[list[cst.FunctionDef]]:
        """The getters a read of ``name`` may run when every binding of it in this file that
        may be a descriptor is a plain ``property`` whose getter is a function of its class
        (``@property def name``, ``name = property(f)``); None when some binding is another
        descriptor (``cached_property`` writes the instance's dict, an object of unknown type)."""
        found: list[cst.FunctionDef] = []
        for cls in iter_nodes(self.source.module, (cst.ClassDef,)):
            items = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
            functions = {f.name.value: f for f in items if isinstance(f, cst.FunctionDef)}
            for stmt in items:
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name and stmt.decorators:
                    shown = [dotted(d.decorator) for d in stmt.decorators]
                    if shown in (["property"], ["builtins.property"]) and "property" not in self.defined:
                        found.append(stmt)
                    elif not (len(shown) == 1 and shown[0] in (f"{name}.setter", f"{name}.deleter")):
                        return None
                small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
                if isinstance(small, cst.AnnAssign) and small.value is not None and not _plain_value(small.value, self.defined) \
                        and name in {n.value for n in iter_nodes(small.target, (cst.Name,))}:
                    return None
                if isinstance(small, cst.Assign) and any(name in {n.value for n in iter_nodes(t.target, (cst.Name,))}
                                                         for t in small.targets):
                    if _plain_value(small.value, self.defined):
                        continue
                    value = small.value
                    fget = value.args[0].value if isinstance(value, cst.Call) and value.args else None
                    if not (isinstance(value, cst.Call) and dotted(value.func) in ("property", "builtins.property")
                            and "property" not in self.defined
                            and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                            and value.args[0].keyword in (None,) and isinstance(fget, cst.Name)
                            and fget.value in functions and not functions[fget.value].decorators):
                        return None
                    found.append(functions[fget.value])
        for fn in iter_nodes(self.source.module, (cst.FunctionDef,)):  # a property outside a class body
            if fn.name.value == name and fn.decorators and all(fn is not g for g in found) \
                    and any(dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator).split(".")[-1]
                            in PROPERTY_DECORATORS for d in fn.decorators) \
                    and not any(dotted(d.decorator) in (f"{name}.setter", f"{name}.deleter") for d in fn.decorators):
                return None
        return found

    def unfollowed(self) -> Optional[str]:
        """Why any attribute read in this file may run code that is not followed (a class of this
        file defines ``__getattr__`` or ``__getattribute__``), or None."""
        for cls in iter_nodes(self.source.module, (cst.ClassDef,)):
            for fn in iter_nodes(cls.body, (cst.FunctionDef,)):
                if fn.name.value in ("__getattr__", "__getattribute__"):
                    return (f"{cls.name.value} defines {fn.name.value} at line {self.source.line(fn)}: reading an "
                            "attribute of it runs code that is not followed")
        return None

    def here(self, name: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        """What reading the attribute ``name`` (None: a name computed at run time) of any object may
        run of this file: the property getters to follow, and why it may run code that cannot be
        followed ('' if not)."""
        descriptors = self.descriptors()
        if name is None:
            if not descriptors:
                return [], ""
            some = sorted(descriptors)[0]
            return [], (f"reads an attribute named at run time, and this file defines descriptors (`{some}` at line "
                        f"{self.source.line(descriptors[some])}) whose reads run code")
        if name not in descriptors:
            return [], ""
        if name not in self._getters:
            self._getters[name] = self.getters(name)
        found = self._getters[name]
        if found is None:
            return [], (f"reads `{name}`, bound at line {self.source.line(descriptors[name])} to a descriptor other "
                        "than a plain property: reading it runs code that is not followed")
        return found, ""

    def named(self, call: cst.Call) -> Optional[list[Optional[str]]]:
        """The attribute names ``call`` reads by name (``getattr``/``hasattr``/``operator.attrgetter``;
        None for one computed at run time), or None when it reads none."""
        func = dotted(call.func)
        if func in NAMED_READS and len(call.args) >= 2:
            return [_literal(call.args[1].value)]
        if func.split(".")[-1] == "attrgetter" and self.origins.get(func.split(".")[0], func).split(".")[0] == "operator":
            names: list[Optional[str]] = []
            for arg in call.args:
                text = _literal(arg.value) if arg.star == "" else None
                names.extend(text.split(".") if text is not None else [None])
            return names or [None]
        return None

    # -- other files --------------------------------------------------------------------------

    def _bases(self, cls: str) -> list[cst.Arg]:
        return [b for b in self.classes[cls].bases if b.keyword is None]

    def family(self, cls: str) -> set[str]:
        """``cls``, its bases of this file and its subclasses of this file (the runtime entry is
        ``cls`` or one of them)."""
        up, todo = set(), [cls]
        while todo:
            c = todo.pop()
            if c in up or c not in self.classes:
                continue
            up.add(c)
            todo.extend(dotted(b.value).split(".")[-1] for b in self._bases(c))
        down, changed = {cls}, True
        while changed:
            changed = False
            for name in self.classes:
                if name not in down and {dotted(b.value).split(".")[-1] for b in self._bases(name)} & down:
                    down.add(name)
                    changed = True
        return up | down

    def foreign(self, cls: str) -> list[tuple[str, Optional[frozenset[str]]]]:
        """The bases of ``cls``'s family defined elsewhere that are not plain torch modules:
        (as written, the names of a vetted one that run code when read, or None: unknown)."""
        if cls in self._foreign:
            return self._foreign[cls]
        found = self._foreign[cls] = []
        for c in sorted(self.family(cls)):
            for b in self._bases(c):
                shown = dotted(b.value)
                if shown.split(".")[-1] in self.classes and "." not in shown:
                    continue
                head, _, rest = shown.partition(".")
                origin = self.origins.get(head)
                names = _vetted(origin + ("." + rest if rest else ""), self.source.path) if origin is not None else None
                if names is None or names:
                    found.append((shown, names))
        return found

    def plain(self, cls: str, name: str) -> bool:
        """Whether ``self.name`` in ``cls``'s family is provably a plain attribute here."""
        if name in MODULE_ATTRIBUTES:
            return True
        for c in self.family(cls):
            body = self.classes[c].body
            for stmt in body.body if isinstance(body, cst.IndentedBlock) else ():
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
                    return True
                small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
                if isinstance(small, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name
                                                         for t in small.targets):
                    return True  # a value that may be a descriptor is judged file-wide (descriptors())
            for t in iter_nodes(body, (cst.AssignTarget,)):
                if isinstance(t.target, cst.Attribute) and dotted(t.target.value) == "self" and t.target.attr.value == name:
                    return True
            for call in iter_nodes(body, (cst.Call,)):
                f = call.func
                if (isinstance(f, cst.Attribute) and f.attr.value in REGISTERS and dotted(f.value) == "self"
                        and call.args and _literal(call.args[0].value) == name):
                    return True
        return False

    def read(self, cls: str, name: Optional[str]) -> Optional[str]:
        """Why reading ``self.name`` (``None``: a name computed at run time) in a method of ``cls``
        may run a getter of another file, or None."""
        for shown, risky in self.foreign(cls):
            if risky is not None:
                if name is None or name in risky:
                    return f"may run a getter of `{shown}` (another file) that is not followed"
                continue
            if name is None or not self.plain(cls, name):
                why = "the name is computed at run time" if name is None else f"nothing here assigns self.{name}"
                return (f"may run a getter of another file (`{shown}`, a base of {cls} defined elsewhere, is not "
                        f"vetted and {why})")
        return None

    def foreign_call(self, cls: str) -> Optional[str]:
        """A base of ``cls`` defined elsewhere and not vetted, whose ``__call__`` may run around
        its forward, or None."""
        unknown = [shown for shown, risky in self.foreign(cls) if risky is None]
        return unknown[0] if unknown else None

