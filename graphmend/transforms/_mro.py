"""A method of a module class looked up as Python does, across the files of the package.

``self.get_head_mask(...)`` in a transformers model's ``forward`` runs
``ModuleUtilsMixin.get_head_mask`` from ``modeling_utils.py``: the model's class inherits it
through ``PreTrainedModel``. Given the class of ``self`` exactly (a compiled entry the runtime
names by ``type(self)``), the method it runs is found from the class definitions alone: each base
is resolved through the module-level binding of its name (a class of the file, or an import from
a file of the package, followed through re-exports), the bases' linearisation is computed by the
C3 rule, and the first class in it that defines the name gives the method.

Anything not shown this way is a reason, never a guess: a base bound more than once or by
something other than a class or an import, a module outside the package (``torch.nn.Module``
excepted: its attributes are read from the installed torch), a package ``__init__`` that does not
bind the name, an order C3 rejects, a class that defines ``__getattribute__``, the name assigned
in a class body or on ``self`` (an instance attribute shadows the method), a decorated method, a
class decorator not shown to set only the class's docstring (``_class_decorators``: its code read
in the package, or transformers' ``@auto_docstring``, read in the installed 4.52.4, trusted by
name), a class defining ``__init_subclass__`` (it may replace its subclasses' methods), a store of
the name on a class of the order in that class's file (``Mixin.method = ...``, ``setattr(Mixin,
...)``). Assumed, as for the classes of one file: no other file replaces a method or a base.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Callable, Optional, Union

import libcst as cst

from graphmend.transforms._class_decorators import decorator_reason
from graphmend.transforms.base import SourceFile, iter_nodes

# The one class outside the package a base may be: torch's, whose attributes the installed torch shows.
TORCH_MODULE = ("<torch>", "Module")
_TORCH_MODULE_NAMES = (("torch", "nn", "Module"), ("torch", "nn", "modules", "module", "Module"))

ClassRef = tuple[str, str]  # (file, class name); TORCH_MODULE for torch.nn.Module
Reader = Callable[[str], Union[SourceFile, str]]


class Hierarchy:
    """The package's class definitions, read on demand through ``read`` (a path relative to the
    repository root -> its parsed file, or why it cannot be read)."""

    def __init__(self, root: str, read: Reader):
        self.root = root
        self.read = read
        self._mro: dict[ClassRef, Union[list[ClassRef], str]] = {}

    # -- what a name means in a file --------------------------------------------------------

    def function_named(self, path: str, name: str) -> Union[tuple[SourceFile, cst.FunctionDef], str]:
        """The undecorated module-level function ``name`` is bound to in ``path`` (followed through
        imports from files of the package)."""
        found = self.class_named(path, name, want=cst.FunctionDef)
        if isinstance(found, str):
            return found
        source = self.read(found[0])
        func = next((s for s in source.module.body if isinstance(s, cst.FunctionDef) and s.name.value == found[1]), None) \
            if not isinstance(source, str) else None
        if func is None or func.decorators:
            return f"{name}() in {found[0]} is not an undecorated function of the file"
        return source, func  # type: ignore[return-value]

    def class_named(self, path: str, name: str, depth: int = 0, want: type = cst.ClassDef) -> Union[ClassRef, str]:
        """The class (or ``want``: a function) ``name`` is bound to at module level in ``path``
        (followed through imports)."""
        source = self.read(path)
        if isinstance(source, str):
            return source
        what = "class" if want is cst.ClassDef else "function"
        scope = source.scopes.get(source.module)
        bindings = list(scope.assignments[name]) if scope is not None and name in scope else []
        if len(bindings) != 1:
            return (f"`{name}` is bound {len(bindings)} times at module level in {path}" if bindings
                    else f"`{name}` is not bound at module level in {path}")
        node = bindings[0].node
        if isinstance(node, want) and source.parent(node) is source.module:
            return (path, name)
        if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) and depth < 8:
            for alias in node.names:
                bound = alias.asname.name.value if alias.asname is not None else alias.name.value  # type: ignore[union-attr]
                if bound == name and isinstance(alias.name, cst.Name):
                    module = _dotted(node.module) if node.module is not None else ""
                    if not node.relative and (module, alias.name.value) in (("torch.nn", "Module"),) and want is cst.ClassDef:
                        return TORCH_MODULE
                    target = self._module_file(path, len(node.relative), module)
                    if target is None:
                        return f"`{name}` is imported in {path} from {'.' * len(node.relative)}{module}, outside the package"
                    return self.class_named(target, alias.name.value, depth + 1, want)
        return f"`{name}` is bound in {path} by something other than a {what} or an import of one"

    def base(self, path: str, expr: cst.BaseExpression) -> Union[ClassRef, str]:
        """The class a base expression of a class in ``path`` names."""
        if isinstance(expr, cst.Name):
            return self.class_named(path, expr.value)
        parts = _dotted(expr).split(".") if isinstance(expr, cst.Attribute) else [""]
        source = self.read(path)
        if "" in parts or isinstance(source, str):
            return f"the base `{_code(expr)}` is not a name this analysis resolves"
        scope = source.scopes.get(source.module)
        bindings = list(scope.assignments[parts[0]]) if scope is not None and parts[0] in scope else []
        if len(bindings) == 1:
            node = bindings[0].node
            full = None
            if isinstance(node, cst.Import):
                for alias in node.names:
                    bound = alias.asname.name.value if alias.asname is not None else _dotted(alias.name).split(".")[0]  # type: ignore[union-attr]
                    if bound == parts[0]:
                        full = (_dotted(alias.name) if alias.asname is not None else parts[0]).split(".") + parts[1:]
            elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None \
                    and not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    bound = alias.asname.name.value if alias.asname is not None else _dotted(alias.name)  # type: ignore[union-attr]
                    if bound == parts[0]:
                        full = _dotted(node.module).split(".") + [_dotted(alias.name)] + parts[1:]
            if full is not None and tuple(full) in _TORCH_MODULE_NAMES:
                return TORCH_MODULE
        return f"the base `{_code(expr)}` in {path} is not a class of the package this analysis resolves"

    def _module_file(self, path: str, level: int, module: str) -> Optional[str]:
        """The file of the package a (relative, or absolute within the same top package) import
        names, or None when it is outside the package or not a file of it."""
        folder = PurePosixPath(path).parent
        if level:
            for _ in range(level - 1):
                folder = folder.parent
            parts = module.split(".") if module else []
        else:
            top = module.split(".")[0]
            base = next((p for p in [folder, *folder.parents] if p.name == top), None)
            if base is None or not os.path.isfile(os.path.join(self.root, str(base), "__init__.py")):
                return None
            folder, parts = base.parent, module.split(".")
        target = folder.joinpath(*parts) if parts else folder
        if os.path.isfile(os.path.join(self.root, f"{target}.py")):
            return f"{target}.py"
        if os.path.isfile(os.path.join(self.root, str(target), "__init__.py")):
            return f"{target}/__init__.py"
        return None

    # -- classes ----------------------------------------------------------------------------

    def definition(self, ref: ClassRef) -> Union[tuple[SourceFile, cst.ClassDef], str]:
        source = self.read(ref[0])
        if isinstance(source, str):
            return source
        cls = next((s for s in source.module.body if isinstance(s, cst.ClassDef) and s.name.value == ref[1]), None)
        return (source, cls) if cls is not None else f"no class {ref[1]} at module level in {ref[0]}"

    def mro(self, ref: ClassRef, depth: int = 0) -> Union[list[ClassRef], str]:
        """The method resolution order of ``ref`` (``object`` left out), or why it is not known."""
        if ref == TORCH_MODULE:
            return [TORCH_MODULE]
        if ref in self._mro:
            return self._mro[ref]
        if depth > 32:
            return f"the bases of {ref[1]} nest too deep to follow"
        found = self.definition(ref)
        if isinstance(found, str):
            return found
        source, cls = found
        if any(a.keyword is not None or a.star for a in cls.bases) or cls.keywords:
            result: Union[list[ClassRef], str] = f"{ref[1]} in {ref[0]} has a metaclass or class keywords"
        else:
            bases = [self.base(ref[0], a.value) for a in cls.bases]
            bad = next((b for b in bases if isinstance(b, str)), None)
            if bad is not None:
                result = bad
            else:
                lists = [self.mro(b, depth + 1) for b in bases]  # type: ignore[arg-type]
                bad = next((m for m in lists if isinstance(m, str)), None)
                result = bad if bad is not None else _c3(ref, [list(m) for m in lists] + [list(bases)])  # type: ignore[misc]
        self._mro[ref] = result
        return result

    def lookup(self, ref: ClassRef, name: str) -> Union[tuple[SourceFile, cst.ClassDef, cst.FunctionDef], str]:
        """The method ``self.name`` runs on an instance of exactly ``ref``, or why it is not known."""
        order = self.mro(ref)
        if isinstance(order, str):
            return order
        for each in order:
            if each == TORCH_MODULE:
                import torch

                if hasattr(torch.nn.Module, "__getattribute__") and "__getattribute__" in torch.nn.Module.__dict__:
                    return "torch.nn.Module defines __getattribute__"
                if hasattr(torch.nn.Module, name):
                    return f"{name}() is torch.nn.Module's (not read)"
                continue
            found = self.definition(each)
            if isinstance(found, str):
                return found
            source, cls = found
            decorated = decorator_reason(self, each[0], cls)
            if decorated:
                return f"{each[1]} in {each[0]} {decorated}"
            for stmt in _body(cls):
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value in ("__getattribute__", "__init_subclass__"):
                    return f"{each[1]} in {each[0]} defines {stmt.name.value}"
            stored = _stored_on(source, each[1], name)
            if stored is not None:
                return f"{each[1]} in {each[0]} is changed at module level ({stored})"
            if _assigns_self(cls, name):
                return f"{each[1]} in {each[0]} assigns self.{name}, which shadows the method"
        for each in order:
            if each == TORCH_MODULE:
                continue
            source, cls = self.definition(each)  # type: ignore[misc]
            bound = [s for s in _body(cls) if _binds(s, name)]
            if not bound:
                continue
            method = bound[0]
            if len(bound) > 1 or not isinstance(method, cst.FunctionDef):
                return f"{name} is bound in {each[1]} ({each[0]}) other than by one method"
            if method.decorators:
                return f"{each[1]}.{name} in {each[0]} is decorated (the decorator may run other code)"
            return source, cls, method
        return f"no class in the bases of {ref[1]} defines {name}()"


    def assigned_outside(self, ref: ClassRef, name: str) -> Optional[str]:
        """A class of ``ref``'s order in another file than ``ref``'s that may assign ``self.name``
        (or the order's reason), or None."""
        order = self.mro(ref)
        if isinstance(order, str):
            return order
        for each in order:
            if each != TORCH_MODULE and each[0] != ref[0]:
                found = self.definition(each)
                if isinstance(found, str) or _assigns_self(found[1], name):
                    return found if isinstance(found, str) else f"{each[1]} in {each[0]} assigns self.{name}"
        return None

    def torch_submodule(self, ref: ClassRef, name: str) -> bool:
        """Whether ``self.name`` on an instance of exactly ``ref`` is only ever a module of torch
        (every assignment ``self.name = nn.X(...)`` or ``torch.nn.X(...)`` in the classes of its
        order, no class defining the name): calling it runs torch's code, none of the package."""
        order = self.mro(ref)
        if isinstance(order, str):
            return False
        found = False
        for each in order:
            if each == TORCH_MODULE:
                import torch

                if hasattr(torch.nn.Module, name):
                    return False
                continue
            source, cls = self.definition(each)  # type: ignore[misc]
            if any(_binds(s, name) for s in _body(cls)):
                return False
            for node in iter_nodes(cls, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Call)):
                if isinstance(node, cst.Call):
                    first = node.args[0].value if node.args else None
                    if (_dotted(node.func) in ("setattr", "object.__setattr__") and isinstance(first, cst.Name)
                            and first.value == "self") or (isinstance(node.func, cst.Attribute)
                                                           and node.func.attr.value == "__setattr__"):
                        return False
                    continue
                if not any(isinstance(t.value, cst.Name) and t.value.value == "self" and t.attr.value == name
                           for t in iter_nodes(node.target, (cst.Attribute,))):
                    continue
                value = getattr(source.parent(node), "value", None) if isinstance(node, cst.AssignTarget) else node.value
                callee = _dotted(value.func).split(".") if isinstance(value, cst.Call) else []
                if isinstance(node, cst.AugAssign) or callee[:-1] not in (["nn"], ["torch", "nn"]) \
                        or not _imports_torch(source, callee[0]):
                    return False
                found = True
        return found


def _imports_torch(source: SourceFile, root: str) -> bool:
    """Whether ``root`` (``nn`` or ``torch``) is bound in ``source`` only by an import of torch's."""
    scope = source.scopes.get(source.module)
    bindings = list(scope.assignments[root]) if scope is not None and root in scope else []
    for b in bindings:
        node = b.node
        if isinstance(node, cst.Import):
            if not any(_dotted(a.name) in ("torch", "torch.nn") for a in node.names):  # type: ignore[union-attr]
                return False
        elif isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None or _dotted(node.module) != "torch":
                return False
        else:
            return False
    return bool(bindings)


def _c3(ref: ClassRef, lists: list[list[ClassRef]]) -> Union[list[ClassRef], str]:
    result = [ref]
    lists = [lst for lst in lists if lst]
    while lists:
        head = next((lst[0] for lst in lists if not any(lst[0] in other[1:] for other in lists)), None)
        if head is None:
            return f"the bases of {ref[1]} have no consistent method resolution order"
        result.append(head)
        lists = [rest for rest in ([x for x in lst if x != head] for lst in lists) if rest]
    return result


def _body(cls: cst.ClassDef) -> list[cst.CSTNode]:
    return list(cls.body.body) if isinstance(cls.body, cst.IndentedBlock) else []


def _binds(stmt: cst.CSTNode, name: str) -> bool:
    """Whether a statement of a class body binds ``name`` (a def, a class, an assignment)."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return stmt.name.value == name
    if isinstance(stmt, (cst.If, cst.Try, cst.For, cst.While, cst.With)):
        return True  # a body that may bind anything: not read
    return any(isinstance(n, cst.Name) and n.value == name for s in iter_nodes(stmt, (cst.AssignTarget, cst.AnnAssign,
                                                                                        cst.AugAssign, cst.ImportAlias))
               for n in iter_nodes(getattr(s, "target", None) or getattr(s, "asname", None) or s, (cst.Name,)))


def _stored_on(source: SourceFile, cls: str, name: str) -> Optional[str]:
    """Code of the file that may store ``name`` on its class ``cls`` (``Cls.name = ...``,
    ``setattr(Cls, ...)`` of that name or of one not written out), or None."""
    for node in iter_nodes(source.module, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Call)):
        if isinstance(node, cst.Call):
            first = node.args[0].value if node.args else None
            second = node.args[1].value if len(node.args) > 1 else None
            if _dotted(node.func) in ("setattr", "type.__setattr__") and isinstance(first, cst.Name) \
                    and first.value == cls and not (isinstance(second, cst.SimpleString) and second.evaluated_value != name):
                return _code(node)
            continue
        for t in iter_nodes(node.target, (cst.Attribute,)):
            if isinstance(t.value, cst.Name) and t.value.value == cls and t.attr.value == name:
                return _code(node.target) + " = ..."
    return None


def _assigns_self(cls: cst.ClassDef, name: str) -> bool:
    for node in iter_nodes(cls, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Call)):
        if isinstance(node, cst.Call):
            first = node.args[0].value if node.args else None
            on_self = isinstance(first, cst.Name) and first.value == "self"
            if (_dotted(node.func) in ("setattr", "object.__setattr__") and on_self) or (
                    isinstance(node.func, cst.Attribute) and node.func.attr.value == "__setattr__"):
                return True  # a name computed at run time may be this one
            continue
        target = node.target
        for t in iter_nodes(target, (cst.Attribute,)):
            if isinstance(t.value, cst.Name) and t.value.value == "self" and t.attr.value == name:
                return True
    return False


def _dotted(node) -> str:
    from graphmend.transforms._analysis import dotted

    return dotted(node)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
