"""What may run in a compiled region between its entry and a site: the code paths a lowered trap
would lose the effects of if it fails.

A lowered check (GM301, GM303) fails the whole graph: Dynamo applies the graph's side effects
(attribute and container writes, in-place updates of inputs, deferred records) only when the
graph returns, so a write made earlier in the same graph is lost where the original kept it.
What matters is what *can run before the site*, not every method of every class that mentions
the site's class (``_init_weights`` or ``set_input_embeddings`` never run inside ``forward``).

The entries are the module classes of this file with a ``forward`` (the runtime makes each a
boundary; only the outermost one lowers a trap). For each entry, the code that may run before
the site is found by walking the call chain backwards from the site:

* in the site's function: what comes before the site (or anywhere in a loop around it), and the
  test of the site itself;
* in each caller, the same before its call into the chain (its arguments included), through
  ``self.method(...)`` (also from subclasses and bases of this file), ``self.submodule(...)``
  (the ``forward`` of a module class of this file it was built from) and module-level
  functions called by name;
* every function those prefixes call, whole and transitively.

A call is resolved or judged: a function or method of this file is followed; torch and
``F`` functions, known pure tensor methods and builtins write nothing (unless in place,
``out=`` or ``inplace=``); ``print``/``logging``/``warnings`` break the graph (their deferred
form counts: a record is a graph side effect); anything else — a method inherited from another
file, a submodule of unknown type, a callee this module cannot name — **may write**.

An attribute read is judged too (``_attributes``): a plain ``property`` of this file runs its
getter, followed as a call; another descriptor, a name computed at run time, or ``self.name``
that a base of another file (not vetted) may define as a property **may write**. A hook
registered in this file blocks it; one registered elsewhere is the runtime's to find: the
outermost boundary looks for hooks under the entry on every call (``_graphmend_hooked``) and
keeps the check in Python while there is one.

Code this file cannot read (another file's module or function, a function passed in, a callable
an instance holds that this file does not show) may call back into any function of this file after
writing state: an entry whose region may run such a call is not clean (``_callback``), and the
runtime keeps the check in Python while a module or callable of another file is held under the
entry.

A caller that cannot be enumerated (the function or method passed around as a value) blocks
every entry. A call into the chain inside a ``try`` with handlers blocks the entries through it
(under compile the handler would not see the original exception).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import builtins

import libcst as cst

from graphmend.transforms._analysis import FRESH, PURE_METHODS, torch_names_of
from graphmend.transforms._attributes import Attributes
from graphmend.transforms._callers import callers as find_callers
from graphmend.transforms._effects import CONTAINER_METHODS, NON_WRITING_BUILTINS, NON_WRITING_MODULES, Modules, call_writes, code, dotted
from graphmend.transforms.base import SourceFile, iter_nodes

# Names the runtime gives a rewritten module whose calls write nothing in the graph.
RUNTIME_PURE = frozenset(("_graphmend_trap", "_graphmend_item_compare", "_graphmend_equal", "_graphmend_deferred"))
# Building a builtin exception (``raise ValueError("...")`` earlier in the function) writes nothing.
BUILTIN_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))
# Reads of a Python value from a tensor: a graph break or a read, never a write.
READ_METHODS = frozenset(("item", "tolist", "numpy", "dim", "size", "numel", "element_size", "stride", "is_contiguous"))
# Container methods that only read.
READ_CONTAINER_METHODS = frozenset(("get", "keys", "values", "items", "index", "count", "copy"))
# Submodules built from these never write state when called (no running statistics, no `inplace=`).
STATELESS_MODULES = frozenset(m for m in NON_WRITING_MODULES if not m.startswith(("BatchNorm", "InstanceNorm")))
# Output calls: under compile each is a graph break (the original runs eagerly between graphs);
# once deferred (``_graphmend_deferred(...)(...)``) it is a record, counted as a write.
LOG_LEVELS = frozenset("debug info warning warn error exception critical fatal log warning_once info_once".split())
LOST = ("may write state in the same compiled graph before the check; a graph that raises loses that write "
        "(Dynamo applies it when the graph returns)")
# The nodes that may write state or run code that does: an attribute read may run a getter.
WRITES = (cst.AugAssign, cst.AssignTarget, cst.Call, cst.Del, cst.Global, cst.Nonlocal, cst.Attribute)


@dataclass
class Before:
    """For one site: the entries whose every path to it is free of writes, the others (entry ->
    why), and why no entry can be trusted (a caller that cannot be enumerated), if so."""

    clean: tuple[str, ...] = ()
    dirty: dict[str, str] = field(default_factory=dict)
    blocked: Optional[str] = None
    own: Optional[str] = None  # why the site's own function may write before it


class _Program:
    """The file's classes, methods and module-level functions, and how calls resolve."""

    def __init__(self, source: SourceFile):
        self.source = source
        self.t = torch_names_of(source.module)
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        for stmt in source.module.body:
            if isinstance(stmt, cst.ClassDef):
                self.classes[stmt.name.value] = stmt
            elif isinstance(stmt, cst.FunctionDef):
                self.functions[stmt.name.value] = stmt
        self.owner: dict[int, str] = {}  # id(method) -> class name
        for name, cls in self.classes.items():
            for f in self.methods(name).values():
                self.owner[id(f)] = name
        self._memo: dict[int, Optional[str]] = {}
        self.defined = frozenset(self.functions) | frozenset(self.classes)
        self.attributes = Attributes(source, self.classes, self.defined)

    # -- classes ------------------------------------------------------------------------------

    def methods(self, cls: str) -> dict[str, cst.FunctionDef]:
        body = self.classes[cls].body
        items = body.body if isinstance(body, cst.IndentedBlock) else ()
        return {f.name.value: f for f in items if isinstance(f, cst.FunctionDef)}

    def bases(self, cls: str) -> list[str]:
        return [dotted(b.value).split(".")[-1] for b in self.classes[cls].bases if b.keyword is None]

    def subclasses(self, cls: str) -> set[str]:
        found, changed = {cls}, True
        while changed:
            changed = False
            for name in self.classes:
                if name not in found and set(self.bases(name)) & found:
                    found.add(name)
                    changed = True
        return found

    def resolve(self, cls: str, name: str) -> Optional[cst.FunctionDef]:
        """``name`` looked up on ``cls`` and its bases in this file (None: not defined here)."""
        todo, seen = [cls], set()
        while todo:
            c = todo.pop(0)
            if c in seen or c not in self.classes:
                continue
            seen.add(c)
            found = self.methods(c).get(name)
            if found is not None:
                return found
            todo.extend(self.bases(c))
        return None

    def inherits_unknown(self, cls: str) -> bool:
        """Whether some base of ``cls`` is not a class of this file (a method may come from it)."""
        todo, seen = [cls], set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            if c not in self.classes:
                return True
            seen.add(c)
            for b in self.bases(c):
                if b not in self.classes:
                    return True
                todo.append(b)
        return False

    def dispatch(self, cls: str, name: str) -> tuple[list[cst.FunctionDef], bool]:
        """What ``self.name(...)`` in a method of ``cls`` may run: the definitions of this file
        (``cls``'s own or inherited, and overrides in its subclasses), and whether it may also
        run one defined elsewhere."""
        targets = []
        unknown = False
        for sub in sorted(self.subclasses(cls)):
            f = self.resolve(sub, name)
            if f is None:
                unknown = unknown or self.inherits_unknown(sub) or sub == cls
            elif all(f is not g for g in targets):
                targets.append(f)
        return targets, unknown

    def submodule(self, cls: str, attr: str, called: bool = True) -> Optional[tuple[str, ...]]:
        """The types ``self.attr`` is built from in the methods of ``cls`` and its bases here:
        class names of this file, or ``""`` for a stateless torch module; None if any
        assignment is something else (or there is none), or (``called``) if a class's own
        ``__call__`` or one of a base of another file may run around its forward."""
        found: list[str] = []
        classes = {c for c in self.classes if c in self._ancestors(cls)}
        for c in classes:
            for node in iter_nodes(self.classes[c].body, (cst.Assign,)):
                for target in node.targets:
                    t = target.target
                    if not (isinstance(t, cst.Attribute) and dotted(t.value) == "self" and t.attr.value == attr):
                        continue
                    value = node.value
                    callee = dotted(value.func) if isinstance(value, cst.Call) else ""
                    leaf = callee.split(".")[-1]
                    if called and callee in self.classes and (self.resolve(callee, "__call__") is not None
                                                              or self.attributes.foreign_call(callee) is not None):
                        return None  # its own __call__ (or one of another file's base) runs around forward
                    if callee in self.classes:
                        found.append(callee)
                    elif leaf in STATELESS_MODULES and callee.split(".")[0] in ("nn", "torch") \
                            and not any(a.keyword is not None and a.keyword.value == "inplace" for a in value.args):  # type: ignore[union-attr]
                        found.append("")
                    else:
                        return None
        return tuple(found) if found else None

    def _ancestors(self, cls: str) -> set[str]:
        todo, seen = [cls], set()
        while todo:
            c = todo.pop()
            if c in seen or c not in self.classes:
                continue
            seen.add(c)
            todo.extend(self.bases(c))
        return seen

    # -- calls --------------------------------------------------------------------------------

    def callees(self, call: cst.Call, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        """The functions of this file ``call`` runs, and why it may write state besides ('' if not)."""
        func = call.func
        names = self.attributes.named(call)
        if names is not None:  # getattr(obj, "name") reads obj.name: a getter may run
            receiver = call.args[0].value if dotted(call.func) in ("getattr", "hasattr") else None
            getters, why = self.reads(names, receiver, owner)
            if why or getters:
                return getters, f"`{code(call)}` {why}" if why else ""
        if isinstance(func, cst.Call) and isinstance(func.func, cst.Name) and func.func.value == "_graphmend_deferred":
            return [], f"the deferred call `{code(func.args[0].value) if func.args else '?'}(...)` (a record in the graph)"
        if isinstance(func, cst.Name):
            name = func.value
            if name in RUNTIME_PURE or name in NON_WRITING_BUILTINS or name in BUILTIN_EXCEPTIONS:
                return [], ""
            if name in self.functions:
                return [self.functions[name]], ""
            return [], f"`{code(call)}` calls {name}(), which is not known to leave state unchanged"
        if isinstance(func, cst.Attribute):
            receiver, name = func.value, func.attr.value
            if dotted(receiver) == "self" and owner is not None:
                targets, unknown = self.dispatch(owner, name)
                if targets and any(name in _self_attrs(self.classes[c]) for c in self._ancestors(owner) | self.subclasses(owner)):
                    return [], f"`{code(call)}` may call an attribute that shadows the method {name}()"
                if targets or not unknown:
                    return targets, ("" if not unknown else f"`{code(call)}` may run a {name}() defined in another file")
                kinds = self.submodule(owner, name)
                if kinds is not None:
                    forwards = [f for k in kinds if k for f in self.dispatch(k, "forward")[0]]
                    if any(k and self.dispatch(k, "forward")[1] for k in kinds):
                        return forwards, f"`{code(call)}` may run a forward defined in another file"
                    return forwards, ""
                return [], f"`{code(call)}` calls a method or submodule not defined in this file"
            if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super" \
                    and owner is not None:
                targets = [f for b in self.bases(owner) for f in [self.resolve(b, name)] if f is not None]
                if targets and not any(self.inherits_unknown(b) and self.resolve(b, name) is None for b in self.bases(owner)):
                    return targets, ""
                return targets, f"`{code(call)}` may run a {name}() defined in another file"
            root = dotted(receiver).split(".")[0]
            if name in LOG_LEVELS and (root in ("logging", "logger", "log", "_logger", "LOGGER") or "logger" in root.lower()):
                return [], ""
            if root == "warnings" and name == "warn":
                return [], ""
            _, why = call_writes(call, self.t, Modules(), PURE_METHODS | READ_METHODS | READ_CONTAINER_METHODS)
            if why:
                return [], why
            kind, _ = self.t.func(func)
            if kind in ("torch", "F"):
                return [], ""
            if name in CONTAINER_METHODS and name not in READ_CONTAINER_METHODS:
                return [], f"`{code(call)}` changes a container that may outlive the call"
            return [], ""
        return [], f"`{code(call)}` calls a value this analysis cannot name"

    # -- writes -------------------------------------------------------------------------------

    def node_write(self, node: cst.CSTNode, fn: cst.FunctionDef) -> tuple[list[cst.FunctionDef], str]:
        """What one node runs (functions of this file) and why it may write state by itself."""
        if isinstance(node, cst.Call):
            return self.callees(node, self.owner.get(id(fn)))
        if isinstance(node, cst.Attribute):
            return self.attribute_read(node, self.owner.get(id(fn)))
        if isinstance(node, (cst.Global, cst.Nonlocal)):
            return [], f"`{code(node)}` rebinds a name outside the function"
        if isinstance(node, cst.Del):
            targets = node.target.elements if isinstance(node.target, cst.Tuple) else [node.target]
            if any(isinstance(getattr(t, "value", t), (cst.Attribute, cst.Subscript)) for t in targets):
                return [], f"`{code(node)}` deletes state"
            return [], ""
        target = node.target  # type: ignore[attr-defined]
        if isinstance(target, (cst.Attribute, cst.Subscript)):
            return [], f"`{code(target)} = ...`" if isinstance(node, cst.AssignTarget) else f"`{code(node)}`"
        if isinstance(node, cst.AugAssign) and isinstance(target, cst.Name) and not _fresh_local(fn, target.value, self.t):
            return [], f"`{code(node)}` may update a tensor it was given in place"
        return [], ""

    def attribute_read(self, node: cst.Attribute, owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        """What reading ``node`` may run: the property getters of this file to follow, and why it
        may run code that is not followed ('' if not). A call's callee and a store are judged as
        such."""
        parent = self.source.parent(node)
        if (isinstance(parent, cst.Call) and parent.func is node) or isinstance(parent, (cst.AssignTarget, cst.AugAssign)):
            return [], ""
        getters, why = self.reads([node.attr.value], node.value, owner)
        return getters, f"`{code(node)}` {why}" if why else ""

    def reads(self, names: list[Optional[str]], receiver: Optional[cst.BaseExpression],
              owner: Optional[str]) -> tuple[list[cst.FunctionDef], str]:
        """Reading ``names`` (None: computed at run time) of ``receiver``: the getters of this file
        it may run, and why it may run code that is not followed — a descriptor of this file that
        is not a plain property, or, on ``self`` or a submodule of this file, a base of another file."""
        getters: list[cst.FunctionDef] = []
        kinds: tuple[str, ...] = ()
        if owner is not None and receiver is not None and dotted(receiver) == "self":
            kinds = (owner,)
        elif owner is not None and isinstance(receiver, cst.Attribute) and dotted(receiver.value) == "self":
            kinds = tuple(k for k in self.submodule(owner, receiver.attr.value, called=False) or () if k)
        for name in names:
            found, why = self.attributes.here(name)
            if why:
                return [], why
            getters.extend(found)
            for kind in kinds:
                why = self.attributes.read(kind, name)
                if why:
                    return [], why
        return getters, ""

    def body_writes(self, fn: cst.FunctionDef, stack: tuple[int, ...] = ()) -> Optional[str]:
        """Why running ``fn`` whole may write state (its callees of this file included), or None."""
        if id(fn) in self._memo:
            return self._memo[id(fn)]
        if id(fn) in stack:
            return None  # recursion adds nothing new
        why = decorated(fn, self.defined) or self._nodes_write(fn, iter_nodes(fn.body, WRITES), stack + (id(fn),))
        self._memo[id(fn)] = why
        return why

    def _nodes_write(self, fn: cst.FunctionDef, nodes: Iterator[cst.CSTNode], stack: tuple[int, ...]) -> Optional[str]:
        for node in nodes:
            targets, why = self.node_write(node, fn)
            if why:
                return f"{why} at line {self.source.line(node)}"
            for target in targets:
                inner = self.body_writes(target, stack)
                if inner:
                    return f"{inner} (in {target.name.value}, called at line {self.source.line(node)})"
        return None

    def prefix_writes(self, fn: cst.FunctionDef, point: cst.CSTNode) -> Optional[str]:
        """Why what runs in ``fn`` before ``point`` (and ``point``'s own test or arguments, and
        all of a loop around it) may write state, or None."""
        return self._nodes_write(fn, self._prefix(fn, point), (id(fn),))

    def _prefix(self, fn: cst.FunctionDef, point: cst.CSTNode) -> Iterator[cst.CSTNode]:
        source = self.source
        start = source.positions[point].start
        loops = set()
        cur = source.parent(point)
        while cur is not None and cur is not fn:
            if isinstance(cur, (cst.For, cst.While)):
                loops.update(id(n) for n in iter_nodes(cur, WRITES))
            cur = source.parent(cur)
        own = {id(n) for n in iter_nodes(point, WRITES)}
        first = _evaluated_first(point)
        early = {id(n) for part in first for n in iter_nodes(part, WRITES)}
        for node in iter_nodes(fn.body, WRITES):
            if id(node) in own:
                if id(node) in early:
                    yield node
                continue
            pos = source.positions[node].start
            if (pos.line, pos.column) < (start.line, start.column) or id(node) in loops:
                yield node


def _evaluated_first(point: cst.CSTNode) -> list[cst.CSTNode]:
    """The parts of ``point`` evaluated before it acts: an ``if``'s or ``assert``'s test, a
    call's callee and arguments."""
    if isinstance(point, (cst.If, cst.While)):
        return [point.test]
    if isinstance(point, cst.Assert):
        return [point.test] + ([point.msg] if point.msg is not None else [])
    if isinstance(point, cst.Call):
        return [point.func] + [a.value for a in point.args]
    return []


def _fresh_local(fn: cst.FunctionDef, name: str, t) -> bool:
    """Whether ``name`` is a local of ``fn`` every binding of which makes a new value (a literal,
    an operator, a call that returns a new tensor): ``x += 1`` then updates nothing it was given."""
    params = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)}
    for star in (fn.params.star_arg, fn.params.star_kwarg):
        if isinstance(star, cst.Param):
            params.add(star.name.value)
    if name in params:
        return False
    bound = False
    for node in iter_nodes(fn.body, (cst.Assign, cst.AnnAssign, cst.For, cst.With, cst.NamedExpr, cst.CompFor)):
        if isinstance(node, cst.Assign):
            targets = [tg.target for tg in node.targets]
            if any(isinstance(tg, cst.Name) and tg.value == name for tg in targets):
                if not _fresh_value(node.value, t):
                    return False
                bound = True
            elif any(name in {n.value for n in iter_nodes(tg, (cst.Name,))} for tg in targets):
                return False  # unpacked from something
        elif isinstance(node, cst.AnnAssign):
            if isinstance(node.target, cst.Name) and node.target.value == name:
                if node.value is None or not _fresh_value(node.value, t):
                    return False
                bound = True
        else:
            target = getattr(node, "target", None)
            items = getattr(node, "items", ())
            names = {n.value for part in ([target] if target is not None else []) + [i.asname for i in items if i.asname]
                     for n in iter_nodes(part, (cst.Name,))}
            if name in names:
                return False
    return bound


def _fresh_value(value: cst.BaseExpression, t) -> bool:
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString, cst.List, cst.Dict, cst.Set, cst.ListComp,
                          cst.DictComp, cst.SetComp, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
        return True
    if isinstance(value, cst.Call):
        kind, name = t.func(value.func)
        if kind in ("torch", "F"):
            return name in FRESH  # vetted: an unlisted function (torch.ravel) may return a view
        if kind == "method":
            return name in FRESH
        return kind == "other" and name in ("len", "int", "float")
    return False


def before(source: SourceFile, site: cst.CSTNode, program: Optional[_Program] = None) -> Before:
    """What may run before ``site`` in a compiled region, per entry (see the module's doc);
    ``program``: the file's, or a variant that judges writes otherwise (``_merged``)."""
    from graphmend.transforms._boundary import compiled_functions, enclosing_function, inside_try, module_classes_with_forward
    from graphmend.transforms._boundary import _outermost_function as _outermost
    from graphmend.transforms._callback import entry_callback

    program = program if program is not None else _Program(source)
    fn = enclosing_function(source, site)
    if fn is None:
        return Before(blocked="the check runs at module level, outside any compiled region")
    unseen = _unfollowed_code(program)
    if unseen:
        return Before(blocked=unseen)
    forwards = set(module_classes_with_forward(source))
    result = Before()
    seen: set[tuple[int, int]] = set()
    todo: list[tuple[cst.FunctionDef, cst.CSTNode, str]] = [(fn, site, "")]
    reasons: dict[str, str] = {}
    reached: set[str] = set()
    while todo:
        f, point, dirt = todo.pop()
        if (id(f), id(point)) in seen:
            continue
        seen.add((id(f), id(point)))
        why = dirt
        if not why:
            written = program.prefix_writes(f, point)
            why = f"{written} {LOST}" if written else None
        if f is fn and point is site:
            result.own = why
        if decorated(f, program.defined):
            result.blocked = decorated(f, program.defined)
            return result
        owner = program.owner.get(id(f))
        if owner is None and source.parent(f) is not source.module:
            result.blocked = f"{f.name.value} is a nested function; its callers are not followed"
            return result
        if owner is not None and f.name.value == "forward":
            for entry in program.subclasses(owner):
                if entry in forwards and program.resolve(entry, "forward") is f:
                    reached.add(entry)
                    if why and entry not in reasons:
                        reasons[entry] = why
        callers, unknown = find_callers(program, f, owner)
        if unknown:
            result.blocked = unknown
            return result
        for caller, call in callers:
            handler = inside_try(source, call)
            extra = why
            if handler is not None and not extra:
                extra = (f"the call at line {source.line(call)} is inside the `try` at line {source.line(handler)}, whose "
                         "handlers would not see the original exception: under compile the assertion fails the whole graph")
            todo.append((caller, call, extra))
    # Code this file cannot read may call back into any of its functions after writing state: an
    # entry whose region may run such code is not clean (``_callback``).
    for entry in sorted(reached - set(reasons)):
        why = entry_callback(program, program.resolve(entry, "forward"))
        if why:
            reasons[entry] = f"{why} {LOST}"
    outer = _outermost(source, site)
    if outer is not None and outer.name.value in compiled_functions(source) and source.parent(outer) is source.module:
        why = entry_callback(program, outer)
        if why:
            result.blocked = f"{why} {LOST}"
            return result
    result.dirty = {e: reasons[e] for e in sorted(reached) if e in reasons}
    result.clean = tuple(sorted(reached - set(reasons)))
    return result


HOOKS = ("register_forward_pre_hook", "register_forward_hook", "register_module_forward_pre_hook",
         "register_module_forward_hook", "register_full_backward_pre_hook", "register_module_full_backward_hook")
# (``property``: its getter runs when the attribute is read, followed as such, and nothing around it)
HARMLESS_DECORATORS = ("staticmethod", "classmethod", "property")
# Decorators of transformers that only set the function's __doc__ and return the function itself
# (never a wrapper): vetted by name, and only when imported (a definition in the file is read).
DOC_DECORATORS = ("auto_docstring", "add_start_docstrings", "add_start_docstrings_to_model_forward",
                  "add_code_sample_docstrings", "replace_return_docstrings")


def decorated(fn: cst.FunctionDef, defined: frozenset[str] = frozenset()) -> Optional[str]:
    """Why ``fn``'s decorators may run code around it (None: none, only ``staticmethod``/
    ``classmethod``/``property``, or a docstring decorator imported from elsewhere — none of them
    one of ``defined``)."""
    for d in fn.decorators:
        name = dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
        leaf = name.split(".")[-1]
        if (name not in HARMLESS_DECORATORS or name in defined) and not (leaf in DOC_DECORATORS and leaf not in defined):
            return (f"{fn.name.value}() is decorated (`@{code(d.decorator)}`): what the decorator runs around it is "
                    "not followed")
    return None


def _unfollowed_code(program: _Program) -> Optional[str]:
    """Code of this file that runs inside a compiled region without a call this analysis follows:
    module hooks (they run around a submodule's forward; hooks registered elsewhere are the
    runtime's to find) and descriptors (a plain attribute read runs their getter: ``_attributes``)."""
    source = program.source
    for node in iter_nodes(source.module, (cst.Call,)):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in HOOKS:
            return (f"`{code(node.func)}(...)` at line {source.line(node)} registers a hook, which runs in the graph "
                    "around a module's forward and is not followed")
    return program.attributes.unfollowed()


def _self_attrs(cls: cst.ClassDef) -> set[str]:
    """The names the class's methods assign as ``self.name = ...``."""
    return {t.target.attr.value for t in iter_nodes(cls.body, (cst.AssignTarget,))
            if isinstance(t.target, cst.Attribute) and dotted(t.target.value) == "self"}
