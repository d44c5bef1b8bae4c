"""What a predicated site (GM101, GM402) may read where the original did not: attribute reads.

``torch.where`` computes both values, and the layout guard reads every operand before the
select, so an attribute read in the branch not taken now runs on every call, and one in the
condition runs twice (guard, then condition). A read is code when the attribute is a property
or another descriptor (its getter may print, draw random numbers, write state), and it may
raise where the original never made it: ``self.memory.keys`` while ``self.memory`` is None,
``x.grad * 2`` before any backward, ``cfg.eps`` on an object without it, ``x.imag`` on a real
tensor. So every attribute chain a site reads must be one of these, or the site is declined
with a reason naming the read:

* a chain rooted at ``torch``/``F`` (``torch.float16``) or at a module imported with ``import``
  (``tables.W``: a module attribute; a module-level ``__getattr__`` is assumed absent);
* a name, or one of the accepted reads below, followed only by attributes that describe a
  tensor (``x.dtype``, ``x.shape``, ``self.weight.T``; not ``grad``, which may be None, nor
  ``imag``, which raises on a real tensor);
* ``self.<name>`` in a method of a class of this file, where :mod:`_attributes` shows the read
  runs no getter (no descriptor of that name in this file, no ``__getattr__``, no unvetted base
  of another file that may define one), ``name`` is bound at the top level of an ``__init__`` of
  the class or a base in this file (so it is set before any call), and every binding of it in
  the class, its bases and its subclasses here is a tensor (``nn.Parameter(...)``, a torch
  factory such as ``torch.ones(...)``, or a registered buffer or parameter: its value is taken
  to be a tensor, as a function's parameters are, unless it is a literal ``None``) or a
  Python number (for arithmetic only, never followed by a tensor attribute); never ``del``-ed,
  never set by ``setattr``. ``self.training`` (nn.Module's own) is accepted as well;
* ``self.<sub>.weight`` where ``self.<sub>`` is bound that way only to a torch.nn module whose
  ``weight`` is always a parameter (:data:`WEIGHTED`, checked against torch by the tests), and
  nothing here assigns ``self.<sub>.<anything>``.

What this cannot see: code in other files that sets such an attribute to None later
(``model.scale = None`` from a caller).
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from graphmend.transforms._attributes import MODULE_ATTRIBUTES, REGISTERS, Attributes, origins
from graphmend.transforms._dtypes import MODULE_ARGUMENTS, MODULE_OUTPUTS
from graphmend.transforms._effects import code, dotted
from graphmend.transforms.base import SourceFile, iter_nodes

# Attributes that describe a tensor (or read a view of it) and exist on every tensor.
TENSOR_ATTRS = frozenset("""
dtype shape device ndim layout is_cuda is_sparse is_quantized is_nested is_meta is_mkldnn
requires_grad grad_fn is_leaf T mT H mH real data itemsize nbytes
""".split())
# Attributes of torch.finfo(...) / torch.iinfo(...).
INFO_ATTRS = frozenset("bits eps max min tiny smallest_normal resolution dtype".split())
# torch.nn modules whose ``weight`` is a Parameter whatever their constructor arguments.
WEIGHTED = frozenset("""
Linear Bilinear Embedding EmbeddingBag Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d
""".split())
# torch functions that return one tensor (for ``self.x = torch.<f>(...)``).
TENSOR_FACTORIES = frozenset("""
zeros ones full empty arange linspace logspace eye rand randn randint randperm tensor as_tensor zeros_like
ones_like full_like empty_like rand_like randn_like tril triu cat stack
""".split())
# Tensor methods that return one tensor (``torch.ones(3).float()``).
TENSOR_METHODS = frozenset("""
to float half double bfloat16 long int bool clone detach contiguous view reshape unsqueeze squeeze transpose
permute expand t mul add sub neg abs exp log sqrt
""".split())


def chain_of(node: cst.Attribute) -> tuple[cst.BaseExpression, list[str]]:
    """``a.b.c`` -> (``a``, ["b", "c"])."""
    attrs: list[str] = []
    cur: cst.BaseExpression = node
    while isinstance(cur, cst.Attribute):
        attrs.append(cur.attr.value)
        cur = cur.value
    attrs.reverse()
    return cur, attrs


def imported_modules(module: cst.Module) -> set[str]:
    """The dotted module paths the module's top-level ``import`` statements bind, under their
    local names (``import a.b`` -> ``a``, ``a.b``; ``import a.b as c`` -> ``c``)."""
    found: set[str] = set()
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                for a in small.names:
                    if a.asname is not None:
                        found.add(dotted(a.asname.name))
                    else:
                        parts = dotted(a.name).split(".")
                        found.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return found


class Reads:
    """Judges the attribute reads of one site (see the module docs)."""

    def __init__(self, source: SourceFile, func: Optional[cst.FunctionDef], torch_names: frozenset[str]):
        self.source = source
        self.torch_names = torch_names
        self.modules = imported_modules(source.module)
        self.classes = {s.name.value: s for s in source.module.body if isinstance(s, cst.ClassDef)}
        defined = frozenset(self.classes) | frozenset(
            s.name.value for s in source.module.body if isinstance(s, cst.FunctionDef))
        self.attributes = Attributes(source, self.classes, defined)
        self.origins = origins(source.module)
        self._rebound: Optional[frozenset[str]] = None  # filled by _full
        self.cls: Optional[str] = None
        self.self_name: Optional[str] = None
        owner = source.parent(source.parent(func)) if func is not None else None  # type: ignore[arg-type]
        if isinstance(owner, cst.ClassDef) and owner.name.value in self.classes and func.params.params \
                and not any(dotted(d.decorator) in ("staticmethod", "classmethod") for d in func.decorators):
            self.cls = owner.name.value
            self.self_name = func.params.params[0].name.value
        self._kinds: dict[str, Optional[str]] = {}
        self._modules: dict[str, frozenset[Optional[str]]] = {}  # filled with _kinds, for output_classes

    def check(self, expr: Optional[cst.CSTNode]) -> Optional[str]:
        """Why some attribute read in ``expr`` may raise or run code where it did not run, or None."""
        if expr is None:
            return None
        if isinstance(expr, cst.Attribute):
            base, _ = chain_of(expr)
            return self.why(expr) or self.check(base)
        if isinstance(expr, cst.Call):
            receiver = expr.func.value if isinstance(expr.func, cst.Attribute) else expr.func
            return next((w for w in (self.check(n) for n in [receiver, *expr.args]) if w), None)
        return next((w for w in (self.check(c) for c in expr.children) if w), None)

    def why(self, node: cst.Attribute) -> Optional[str]:
        """Why reading the chain ``node`` may raise or run code, or None (a sub-chain of an
        accepted chain is judged with it, not alone)."""
        base, attrs = chain_of(node)
        text = code(node)
        if "imag" in attrs:
            return f"reads `{text}`; `.imag` raises on a tensor that is not complex"
        root = base.value if isinstance(base, cst.Name) else None
        if root is not None and (root in self.torch_names or dotted(base) in self.modules):
            return None  # torch's constants, a module's attribute
        k = len(attrs)
        while k > 0 and attrs[k - 1] in TENSOR_ATTRS:
            k -= 1
        if k == 0:
            return None  # a name or a computed tensor, described (`x.dtype`, `(x + 1).T`)
        if root is None:
            if isinstance(base, cst.Call) and dotted(base.func).split(".")[-1] in ("finfo", "iinfo") \
                    and dotted(base.func).split(".")[0] in self.torch_names and len(attrs) == 1 and attrs[0] in INFO_ATTRS:
                return None
            return (f"reads `{text}`, an attribute of a computed value that may be missing or run a getter where "
                    "its branch was not taken")
        if "grad" in attrs[:k]:
            return f"reads `{text}`; a gradient is None until a backward pass, and would raise where its branch was not taken"
        if root == self.self_name and k in (1, 2):
            kind, why = self._self_kind(attrs[0])
            if why:
                return why
            if k == 1 and (kind == "tensor" or (kind == "number" and k == len(attrs))):
                return None
            if k == 2 and kind == "weighted" and attrs[1] == "weight":
                return None
            if kind in ("module", "weighted"):
                return (f"reads `{text}`, an attribute of the submodule `{root}.{attrs[0]}` that is not shown to be "
                        "a tensor it always has (None or missing would raise where its branch was not taken)")
        if root == self.self_name:
            return (f"reads `{text}`, which is not shown to be a tensor set in `__init__`: it may be None or "
                    "missing and raise where its branch was not taken")
        return (f"reads `{text}`, an attribute of `{root}` that is not shown to exist and be a plain tensor (a missing "
                "attribute, an attribute of None or a property getter would raise or run where its branch was not taken)")

    def why_evaluated(self, node: cst.Attribute) -> Optional[str]:
        """Like :meth:`why`, for a chain the original reads on every call before anything else of
        the site (the first test's first leaf): the rewrite reads it again (the layout guard, then
        the select's condition), so it must run no getter, but it may be None or missing, since
        then the original raised there too. ``self.limit`` set from a constructor argument is
        such a read; ``self.config.limit`` is not (``config``'s class is not known here)."""
        base, attrs = chain_of(node)
        k = len(attrs)
        while k > 0 and attrs[k - 1] in TENSOR_ATTRS:
            k -= 1
        if isinstance(base, cst.Name) and base.value == self.self_name and k == 1 and "grad" not in attrs \
                and "imag" not in attrs:
            return self._self_kind(attrs[0])[1]
        return self.why(node)

    # -- self.<name> --------------------------------------------------------------------------

    def _self_kind(self, name: str) -> tuple[Optional[str], Optional[str]]:
        """(what every binding of ``self.name`` is: tensor / number / weighted / module, or None;
        why reading it may run code, or None)."""
        assert self.cls is not None
        unfollowed = self.attributes.unfollowed()
        if unfollowed:
            return None, unfollowed
        getters, why = self.attributes.here(name)
        if getters:
            return None, f"reads property `{name}`, whose getter runs on every read"
        if why:
            return None, why
        why = self.attributes.read(self.cls, name)
        if why:
            return None, f"reads `self.{name}`, which {why}"
        if name in MODULE_ATTRIBUTES:
            return "number", None
        if name not in self._kinds:
            self._kinds[name] = self._bindings(name)
        kind = self._kinds[name]
        return kind, None

    def _up(self) -> list[cst.ClassDef]:
        """The class and its bases defined in this file."""
        seen: list[str] = []
        todo = [self.cls]
        while todo:
            c = todo.pop()
            if c in seen or c not in self.classes:
                continue
            seen.append(c)  # type: ignore[arg-type]
            todo.extend(dotted(b.value).split(".")[-1] for b in self.classes[c].bases if b.keyword is None)  # type: ignore[index]
        return [self.classes[c] for c in seen]

    def _bindings(self, name: str) -> Optional[str]:
        """The one kind of value every binding of ``self.name`` in the family gives, when it is
        also bound at the top level of an ``__init__`` of the class or a base; else None."""
        kinds: set[Optional[str]] = set()
        modules: set[Optional[str]] = set()  # the torch.nn class of each binding (None: not one)
        family = [self.classes[c] for c in self.attributes.family(self.cls)]  # type: ignore[arg-type]
        for cls in family:
            for node in iter_nodes(cls.body, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Del, cst.Call)):
                if isinstance(node, cst.Assign):
                    for t in node.targets:
                        if _is_self_attr(t.target, name):
                            kinds.add(self._value_kind(node.value))
                            modules.add(self._module_class(node.value))
                        elif any(_is_self_attr(n, name) or _under_self_attr(n, name)
                                 for n in iter_nodes(t.target, (cst.Attribute,))):
                            return None  # unpacked into, or an attribute of it assigned
                elif isinstance(node, cst.AnnAssign) and node.value is not None and _is_self_attr(node.target, name):
                    kinds.add(self._value_kind(node.value))
                    modules.add(self._module_class(node.value))
                elif isinstance(node, cst.Del) and any(_is_self_attr(n, name) for n in iter_nodes(node.target, (cst.Attribute,))):
                    return None
                elif isinstance(node, cst.Call):
                    func = dotted(node.func)
                    first = node.args[0].value if node.args else None
                    literal = first.evaluated_value if isinstance(first, cst.SimpleString) else None
                    if func in ("setattr", "delattr", "object.__setattr__") and len(node.args) > 1 \
                            and dotted(node.args[0].value) == "self":
                        second = node.args[1].value
                        if not isinstance(second, cst.SimpleString) or second.evaluated_value == name:
                            return None
                    elif func.startswith("self.") and func[5:] in REGISTERS and (literal is None or literal == name):
                        if literal is None or len(node.args) < 2:
                            return None
                        value = node.args[1].value
                        # a registered buffer or parameter is taken to hold a tensor, as a function's
                        # parameters are; only an evident None is not
                        evident_none = isinstance(value, cst.Name) and value.value == "None"
                        kinds.add(None if evident_none else "module" if func == "self.add_module"
                                  or func == "self.register_module" else "tensor")
                        modules.add(None)
        if len(kinds) != 1 or None in kinds:
            return None
        for cls in self._up():
            for stmt in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__" \
                        and isinstance(stmt.body, cst.IndentedBlock):
                    for line in stmt.body.body:
                        if isinstance(line, cst.SimpleStatementLine) and any(_binds(s, name) for s in line.body):
                            self._modules[name] = frozenset(modules)
                            return kinds.pop()
        return None

    def _value_kind(self, value: cst.BaseExpression) -> Optional[str]:
        """tensor / number / weighted (a torch.nn module of :data:`WEIGHTED`) / module (another
        torch.nn module) / None (anything else, None included)."""
        if isinstance(value, (cst.Integer, cst.Float)):
            return "number"
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            return "number" if self._value_kind(value.expression) == "number" else None
        if isinstance(value, cst.BinaryOperation):
            kinds = {self._value_kind(value.left), self._value_kind(value.right)}
            return "tensor" if "tensor" in kinds and kinds <= {"tensor", "number"} else None
        if not isinstance(value, cst.Call):
            return None
        func = dotted(value.func)
        full = self._full(func)
        head, _, rest = func.partition(".")
        if full in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"):
            return "tensor"
        if _nn_class(full):
            return "weighted" if _nn_class(full) in WEIGHTED else "module"
        if head in self.torch_names and rest in TENSOR_FACTORIES:
            return "tensor"
        if isinstance(value.func, cst.Attribute) and value.func.attr.value in TENSOR_METHODS \
                and self._value_kind(value.func.value) == "tensor":
            return "tensor"
        return None

    def _module_class(self, value: cst.BaseExpression) -> Optional[str]:
        """``Linear`` for ``nn.Linear(...)`` (torch.nn's own class) built with only the arguments
        :data:`_dtypes.MODULE_ARGUMENTS` names for it (not ``dtype=``, ``_weight=``, ``**kw``);
        None for any other value."""
        if not isinstance(value, cst.Call):
            return None
        found = _nn_class(self._full(dotted(value.func)))
        vetted = MODULE_ARGUMENTS.get(found or "", ())
        positional = [a for a in value.args if a.keyword is None]
        if any(a.star for a in value.args) or len(positional) > len(vetted) \
                or any(a.keyword is not None and a.keyword.value not in vetted for a in value.args):
            return None
        return found

    def _full(self, func: str) -> str:
        """A dotted callee with its first name resolved through this file's imports; "" when
        that name is bound anywhere else in the file (``Linear = Mask``, an ``nn`` parameter or
        local, an import in a function or a ``try``) or the file writes ``globals()``."""
        if self._rebound is None:
            self._rebound = _rebound(self.source.module)
        head, _, rest = func.partition(".")
        if head in self._rebound or "globals" in self._rebound:
            return ""
        return self.origins.get(head, head) + ("." + rest if rest else "")

    def output_classes(self, call: cst.Call) -> Optional[frozenset[str]]:
        """The dtype classes ``self.<name>(...)`` returns when every binding of ``self.<name>``
        (as :meth:`_bindings` finds them) is a torch.nn module of :data:`_dtypes.MODULE_OUTPUTS`
        built with only the arguments :data:`_dtypes.MODULE_ARGUMENTS` vets (``self.lin =
        nn.Linear(...)``: float or complex, never bool or integer), and nothing in this file may
        change what the call returns (:meth:`_retouched`: a module hook, a rebinding of the
        attribute by another object, the registry or a computed name, a patched torch class, the
        submodule escaping, a store to another object's attribute, a cast to any dtype), and the
        callee's name is bound by the imports alone; else None. Assumed: no other file registers
        a hook on the module (a forward hook may replace its output with a tensor of any dtype),
        rebinds the attribute, replaces or casts its parameters (``model.to(torch.float8_e4m3fn)``,
        ``load_state_dict(assign=True)``) or walks its modules to do so."""
        func = call.func
        if self.cls is None or not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                                    and func.value.value == self.self_name):
            return None
        kind, why = self._self_kind(func.attr.value)
        modules = self._modules.get(func.attr.value)
        if why or kind not in ("weighted", "module") or not modules or not modules <= set(MODULE_OUTPUTS) \
                or self._retouched(func.attr.value):
            return None
        return frozenset(c for m in modules for c in MODULE_OUTPUTS[m][0].split())  # type: ignore[index]

    def _retouched(self, name: str) -> bool:
        """Whether code of this file may change what ``self.name(...)`` returns besides the
        ``self.name = ...`` bindings of the class's family (:meth:`_bindings` judges those): a
        ``register_*hook`` or ``register_parametrization`` call anywhere, any other store to an
        attribute ``name`` (``self.head.proj = nn.Identity()``, ``block.proj.forward = f``), a
        use of a module's ``_modules`` registry or of an object's ``__dict__``, a
        ``setattr``/``delattr`` or a registration (``add_module``...) by a computed name or by
        ``name`` on another object, or a store to an attribute of torch itself
        (``nn.Linear.forward = f``); any use of an attribute ``name`` but calling ``self.name(...)``
        and binding it (``proj = self.proj``, ``setattr(self.proj, "forward", f)``,
        ``self.proj.to(...)``, ``self.proj.register_forward_hook``: the module escapes); a store to
        an attribute of anything but ``self`` itself (``m.weight.data = ...`` in a function given
        to ``apply``) other than ``requires_grad``; a cast that may give a parameter any dtype
        (``type``, ``_apply``, ``set_``, ``load_state_dict``), a float8 or complex32 dtype; a name
        imported from torch that registers or holds global hooks (``register_module_forward_hook
        as on_forward``)."""
        family = [self.classes[c] for c in self.attributes.family(self.cls)]  # type: ignore[arg-type]
        own = {id(n) for cls in family for n in iter_nodes(cls.body, (cst.Attribute,)) if _is_self_attr(n, name)}
        if any("hook" in full.rsplit(".", 1)[-1] or full.rsplit(".", 1)[-1].startswith("_global")
               for full in self.origins.values() if full.startswith("torch.")):
            return True
        for node in iter_nodes(self.source.module, (cst.Call, cst.Attribute, cst.Assign, cst.AnnAssign, cst.SimpleString,
                                                    cst.AugAssign, cst.Del, cst.For, cst.CompFor, cst.AsName)):
            if isinstance(node, cst.SimpleString):
                if node.evaluated_value == "_modules":
                    return True
                continue
            if isinstance(node, cst.Attribute):
                if node.attr.value in _ESCAPES or _EXOTIC_DTYPE.match(node.attr.value):
                    return True
                if node.attr.value == name and not self._called_or_bound(node, name):
                    return True
                continue
            if isinstance(node, cst.Call):
                func = node.func
                leaf = func.attr.value if isinstance(func, cst.Attribute) else dotted(func)
                if (leaf.startswith("register_") and "hook" in leaf) or leaf == "register_parametrization" \
                        or leaf in _RECASTS:
                    return True
                if leaf in _NAMED_STORES and (not any(_literal_arg(node, k) not in (None, name) for k in (0, 1))
                                              or any(self._torch_rooted(a.value) for a in node.args)):
                    return True
                literal = _literal_arg(node, 0)
                receiver = func.value if isinstance(func, cst.Attribute) else None
                if leaf in REGISTERS and literal in (None, name) and not (receiver is not None and dotted(receiver) == "self"):
                    return True
                continue
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
                targets = [node.target]
            else:
                targets = [node.target if isinstance(node, cst.Del) else node.name]
            for target in targets:
                for attr in iter_nodes(target, (cst.Attribute,)):
                    if (attr.attr.value == name and not (attr is target and id(attr) in own)) \
                            or self._torch_rooted(attr):
                        return True
                    if attr is target and dotted(attr.value) != "self" and attr.attr.value != "requires_grad":
                        return True  # an attribute of another object: maybe a submodule's (m.weight = ...)
        return False

    def _called_or_bound(self, node: cst.Attribute, name: str) -> bool:
        """Whether ``node`` (an attribute ``name``) is ``self.name`` called (``self.name(x)``)
        or a store's target (judged as a binding or a store where stores are)."""
        parent = self.source.parent(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            return _is_self_attr(node, name)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _SUBMODULE_READS:
            return _is_self_attr(node, name)  # its weight read (stores through it are judged as stores)
        if isinstance(parent, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)) and parent.target is node:
            return True
        return isinstance(parent, cst.Del) and parent.target is node

    def _torch_rooted(self, node: cst.BaseExpression) -> bool:
        """``nn.Linear``, ``torch.nn.functional.linear``: a chain into torch.nn (through the imports)."""
        return (self._full(dotted(node)) + ".").startswith("torch.nn.")


def _nn_class(full: str) -> Optional[str]:
    """``Linear`` for ``torch.nn.Linear``; None for anything else."""
    return full.rsplit(".", 1)[1] if full.startswith("torch.nn.") and full.count(".") == 2 else None


# Calls that store an attribute by the name given as their second argument.
_NAMED_STORES = frozenset(("setattr", "delattr", "__setattr__", "__delattr__"))
# Calls that may give a module's parameters any dtype (``Module.type(torch.bool)``, ``_apply(fn)``,
# ``Tensor.set_``, ``load_state_dict(..., assign=True)``, ``vector_to_parameters``).
_RECASTS = frozenset(("type", "_apply", "set_", "load_state_dict", "vector_to_parameters", "swap_tensors"))
# Attributes of a submodule that may be read without it escaping: its parameters (a store through
# one, ``w.data = ...``, or a cast, ``w.set_(...)``, is judged where stores and casts are) and sizes.
_SUBMODULE_READS = frozenset("""
weight bias in_features out_features in1_features in2_features num_embeddings embedding_dim in_channels
out_channels normalized_shape
""".split())
# Attributes that reach a module's registries or an object's namespace.
_ESCAPES = frozenset(("_modules", "__dict__", "_parameters", "_forward_hooks", "_forward_pre_hooks"))
# Dtypes of the float or complex class on which arithmetic has no kernel (``1 - h`` raises for a
# float8 or complex32 table): a module converted to one returns them.
_EXOTIC_DTYPE = re.compile(r"float8_|complex32$|chalf$|cfloat16$")


def _rebound(module: cst.Module) -> frozenset[str]:
    """The names the module binds other than by its top-level ``import`` statements: assignment,
    loop, ``with``, walrus and ``except`` targets, parameters, ``def``/``class`` names, imports
    elsewhere (in a function, a ``try``), ``global`` names; ``globals`` when it calls ``globals()``."""
    top = {id(small) for stmt in module.body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body}
    found: set[str] = set()
    for node in iter_nodes(module, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.WithItem,
                                    cst.ExceptHandler, cst.NamedExpr, cst.Param, cst.FunctionDef, cst.ClassDef,
                                    cst.Import, cst.ImportFrom, cst.Global, cst.Call)):
        if isinstance(node, cst.Call):
            if dotted(node.func) == "globals":
                found.add("globals")
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            if id(node) not in top and not isinstance(node.names, cst.ImportStar):
                found.update(dotted(a.asname.name if a.asname is not None else a.name).split(".")[0]
                             for a in node.names)
        elif isinstance(node, cst.Global):
            found.update(n.name.value for n in node.names)
        elif isinstance(node, (cst.Param, cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
        elif isinstance(node, (cst.WithItem, cst.ExceptHandler)):
            asname = node.asname if isinstance(node, cst.WithItem) else node.name
            if asname is not None:
                found.update(_names(asname.name))
        else:
            found.update(_names(node.target))
    return frozenset(found)


def _names(target: cst.CSTNode) -> set[str]:
    """The plain names a store's target binds (``a``, ``a, (b, *c)``; not ``a.b`` or ``a[0]``)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _names(e.value)}
    if isinstance(target, cst.StarredElement):
        return _names(target.value)
    return set()


def _literal_arg(call: cst.Call, k: int) -> Optional[str]:
    """The string literal ``call`` passes as its ``k``-th positional argument, or None."""
    arg = call.args[k].value if len(call.args) > k and call.args[k].keyword is None and not call.args[k].star else None
    value = arg.evaluated_value if isinstance(arg, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _is_self_attr(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Attribute) and dotted(node.value) == "self" and node.attr.value == name


def _under_self_attr(node: cst.CSTNode, name: str) -> bool:
    """``self.name.<anything>`` (an attribute of it assigned)."""
    return isinstance(node, cst.Attribute) and _is_self_attr(node.value, name)


def _binds(small: cst.BaseSmallStatement, name: str) -> bool:
    if isinstance(small, cst.Assign):
        return any(_is_self_attr(t.target, name) for t in small.targets)
    if isinstance(small, cst.AnnAssign):
        return small.value is not None and _is_self_attr(small.target, name)
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        return (dotted(call.func) in {f"self.{r}" for r in REGISTERS} and bool(call.args)
                and isinstance(call.args[0].value, cst.SimpleString) and call.args[0].value.evaluated_value == name)
    return False
