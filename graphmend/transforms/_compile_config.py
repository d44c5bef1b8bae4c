"""What the compile-configuration levers (GM501, GM502) share: the setting in force around every call.

Some breaks have no exact source rewrite, but TorchDynamo captures them when told to:
``capture_scalar_outputs`` turns ``t.item()`` into an unbacked symbolic number,
``capture_dynamic_output_shape_ops`` traces ``nonzero``/``unique``/boolean masks with an unbacked
size. GraphMend proposes the setting *scoped and visible in the source*, never as a hidden global.
What we measured under torch 2.13 decides where it goes:

* ``with torch._dynamo.config.patch(...)`` around ``torch.compile(...)`` does nothing: tracing
  starts at the first *call*, after the ``with`` has ended.
* As a decorator or ``with`` inside the compiled function it is itself a break ("Unsupported
  context manager"), and Dynamo skips the frame.
* Around a call it works, but a recompilation triggered by a later call outside it (new shapes,
  a new dtype) traces without the setting and the break comes back.

So the setting has to be in force around **every** call of the compiled object: the fix wraps the
compiled callable at its compile site (``compiled = torch.compile(model)`` becomes
``compiled = _graphmend_with_config(torch.compile(model), capture_scalar_outputs=True)``; an
``@torch.compile`` function gets ``@_graphmend_with_config(...)`` above it). For a compiled module
the wrapper patches the instance's ``forward`` (measured: one graph, no break, across calls), so
``.train()``, ``.parameters()`` and ``state_dict()`` still work. When the compile site is not in
this file (a library model the user compiles, or GraphMend's own harness compiling a target) the
finding is display-only and says exactly what to add there.

When the setting would not help, nothing is proposed: a captured scalar that decides Python
control flow (``if t.item() > 0``) still breaks — measured: one more graph than without the
setting — and ``range(t.item())`` is specialised on each value (a recompilation per distinct
value, 2 graphs for 2 values). Such a use anywhere in the compiled code declines the whole site,
because the setting would apply to it too. Unbacked sizes may also recompile where Dynamo guards
on them; ``graphmend verify`` and ``benchmarks/beyond_paper_table.py`` count recompilations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional

import libcst as cst

from graphmend.model import Decline, Edit, Fix, Safety, fingerprint
from graphmend.transforms import _analysis as A
from graphmend.transforms._boundary import wrap_text
from graphmend.transforms.base import Outcome, RuleContext, SourceFile, Suppressed, Transform

WRAPPER = "_graphmend_with_config"

WRAPPER_CODE = '''
def {wrapper}(compiled=None, **settings):
    """Run every call of ``compiled`` under ``torch._dynamo.config.patch(**settings)`` (GM5xx).

    Added by graphmend. Dynamo reads its settings when it traces, which happens at a call (the
    first one, and every recompilation), not at ``torch.compile()``: so the settings must be in
    force around each call. A compiled module keeps its type (its ``forward`` is wrapped).
    Used bare as a decorator factory: ``@{wrapper}(capture_scalar_outputs=True)``.
    """
    import functools

    if compiled is None:
        return lambda target: {wrapper}(target, **settings)

    def scoped(call):
        @functools.wraps(call)
        def run(*args, **kwargs):
            if {torch}.compiler.is_compiling():
                return call(*args, **kwargs)  # inlined into an outer compiled call: its settings hold
            with {torch}._dynamo.config.patch(**settings):
                return call(*args, **kwargs)

        return run

    if isinstance(compiled, {torch}.nn.Module):
        compiled.forward = scoped(compiled.forward)
        return compiled
    return scoped(compiled)
'''

# Places where a value must be a concrete Python value: a captured (unbacked) scalar there
# still breaks, or is specialised with a recompilation per value.
_CONTROL_CALLS = frozenset(("range", "bool", "len", "enumerate", "zip", "list", "tuple", "sorted", "reversed"))


@dataclass(frozen=True)
class Trigger:
    """One break the setting captures: the expression and the statement holding it."""

    node: cst.CSTNode
    statement: cst.CSTNode


def _is_compile_call(node: cst.CSTNode, torch_names: frozenset[str]) -> bool:
    if not isinstance(node, cst.Call):
        return False
    d = A.dotted(node.func).split(".")
    return len(d) == 2 and d[0] in torch_names and d[1] == "compile"


def _is_compile_name(node: cst.CSTNode, torch_names: frozenset[str]) -> bool:
    """A bare ``@torch.compile`` decorator."""
    d = A.dotted(node).split(".")
    return len(d) == 2 and d[0] in torch_names and d[1] == "compile"


def _wrapper_settings(call: cst.Call) -> set[str]:
    return {a.keyword.value for a in call.args if a.keyword is not None}


@dataclass
class CompileSite:
    """``X = torch.compile(ARG)`` (``value`` is the compile call) or ``@torch.compile`` on ``func``."""

    statement: cst.CSTNode  # the Assign / FunctionDef to edit
    compile_call: Optional[cst.CSTNode]  # the torch.compile(...) expression (None for a bare decorator)
    wrapper: Optional[cst.Call]  # an existing _graphmend_with_config(...) around it
    compiled: list[cst.FunctionDef]  # the functions whose code it compiles (in this file)
    shown: str  # the compiled object's name, for messages


def compile_sites(source: SourceFile) -> list[CompileSite]:
    t = A.torch_names_of(source.module)
    defs = {s.name.value: s for s in source.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    bound = _instances(source)
    sites: list[CompileSite] = []
    for node in A._iter(source.module):
        if isinstance(node, cst.FunctionDef):
            for dec in node.decorators:
                if _is_compile_call(dec.decorator, t.torch_names) or _is_compile_name(dec.decorator, t.torch_names):
                    wrapper = next((d.decorator for d in node.decorators if isinstance(d.decorator, cst.Call)
                                    and A.dotted(d.decorator.func) == WRAPPER), None)
                    sites.append(CompileSite(node, dec.decorator, wrapper, [node], node.name.value))
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            value = node.value
            wrapper = None
            if isinstance(value, cst.Call) and A.dotted(value.func) == WRAPPER and value.args:
                wrapper, value = value, value.args[0].value
            if not _is_compile_call(value, t.torch_names) or not value.args:  # type: ignore[union-attr]
                continue
            arg = value.args[0].value  # type: ignore[union-attr]
            name = A.dotted(arg) or (A.dotted(arg.func) if isinstance(arg, cst.Call) else "")
            name = bound.get(name, name)
            target = defs.get(name.split(".")[-1]) if name else None
            compiled: list[cst.FunctionDef] = []
            if isinstance(target, cst.FunctionDef):
                compiled = [target]
            elif isinstance(target, cst.ClassDef):
                compiled = [f for f in A._iter(target) if isinstance(f, cst.FunctionDef)]
            sites.append(CompileSite(node, value, wrapper, compiled, A.code(arg)))
    return sites


def _instances(source: SourceFile) -> dict[str, str]:
    """``model = Model(...)`` at any level: the class each plain name was last built from."""
    out: dict[str, str] = {}
    for node in A._iter(source.module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            target = A.dotted(node.targets[0].target)
            callee = A.dotted(node.value.func)
            if target and callee and callee[:1].isupper():
                out[target] = callee
    return out


def control_use(node: cst.CSTNode, source: SourceFile) -> Optional[str]:
    """Where ``node``'s value decides Python control flow or must be a concrete number, if anywhere."""
    child, cur = node, source.parent(node)
    while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
        if isinstance(cur, (cst.If, cst.While)) and cur.test is child:
            return f"an `{'if' if isinstance(cur, cst.If) else 'while'}` test"
        if isinstance(cur, cst.IfExp) and cur.test is child:
            return "a conditional expression's test"
        if isinstance(cur, cst.For) and cur.iter is child:
            return "a `for` loop's iterable"
        if isinstance(cur, cst.Assert) and cur.test is child:
            return "an `assert`"
        if isinstance(cur, cst.BooleanOperation) or (isinstance(cur, cst.UnaryOperation) and isinstance(cur.operator, cst.Not)):
            return "`and`/`or`/`not`"
        if isinstance(cur, cst.Call) and isinstance(cur.func, cst.Name) and cur.func.value in _CONTROL_CALLS and child is not cur.func:
            return f"`{cur.func.value}()`"
        if isinstance(cur, (cst.If, cst.While, cst.For)):
            break  # inside the body, not the header
        child, cur = cur, source.parent(cur)
    return None


def hopeless_use(trigger: Trigger, func: cst.FunctionDef, source: SourceFile) -> Optional[str]:
    """Why the setting would not help this break (its value feeds Python control flow), or None."""
    where = control_use(trigger.node, source)
    if where:
        return f"`{_short(trigger.node)}` (line {source.line(trigger.node)}) feeds {where}"
    stmt = trigger.statement
    if isinstance(stmt, cst.Assign) and any(n is trigger.node for n in A._iter(stmt.value)):
        # `hit = (...).nonzero()[0].tolist()` then `for e in hit:` — follow the names it binds.
        names = set().union(*(_bound_names(t.target) for t in stmt.targets))
        targets = {id(n) for t in stmt.targets for n in A._iter(t.target)}
        for n in A._iter(func):
            if isinstance(n, cst.Name) and n.value in names and id(n) not in targets:
                parent = source.parent(n)
                if isinstance(parent, cst.Attribute) and parent.attr is n:
                    continue
                where = control_use(n, source)
                if where:
                    return f"`{n.value}` (from `{_short(trigger.node)}`, line {source.line(trigger.node)}) feeds {where} at line {source.line(n)}"
    return None


def _short(node: cst.CSTNode, limit: int = 60) -> str:
    """The node's code on one line, shortened for a message."""
    text = " ".join(A.code(node).split()).replace("[ ", "[").replace(" ]", "]")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bound_names(target: cst.CSTNode) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_bound_names(e.value) for e in target.elements)) if target.elements else set()
    return set()


def statement_at(func: cst.FunctionDef, line: int, source: SourceFile) -> Optional[cst.CSTNode]:
    """The innermost simple statement of ``func`` covering ``line``."""
    best = None
    for n in A._iter(func):
        if isinstance(n, cst.BaseSmallStatement) and source.line(n) <= line <= source.end_line(n):
            best = n
    return best


def _statement_of(node: cst.CSTNode, source: SourceFile) -> cst.CSTNode:
    cur = node
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.If, cst.While, cst.For)):
        cur = source.parent(cur)
    return cur if cur is not None else node


class CompileConfigLever(Transform):
    """Base of GM501/GM502 (no ``code``: the registry skips it).

    A subclass names its ``setting`` and says which expressions it captures (:meth:`triggers`).
    """

    setting: ClassVar[str] = ""
    what: ClassVar[str] = ""  # "scalar reads" / "dynamic-shape operators", for messages

    def triggers(self, node: cst.CSTNode, source: SourceFile, *, dynamic: bool) -> list[Trigger]:
        raise NotImplementedError

    def prefilter(self, text: str) -> bool:
        return "torch" in text

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        return [s.statement for s in compile_sites(source)]

    # run() is the whole rule: static mode looks at each compile site's compiled code; dynamic
    # mode starts from the break lines and looks for the compile site that compiles them.
    def run(self, source: SourceFile, ctx: RuleContext, lines: Optional[Iterable[int]] = None) -> list[Outcome]:
        sites = compile_sites(source)
        outcomes: list[Outcome] = []
        if lines is None:
            for site in sites:
                if self.setting in (_wrapper_settings(site.wrapper) if site.wrapper else set()):
                    continue
                found = [t for f in site.compiled for t in self.triggers(f, source, dynamic=False)]
                if not found:
                    continue
                outcomes.append(self._at_site(site, found, source, ctx))
            return _suppressed(outcomes, source, self.code)
        wanted = set(lines)
        handled: set[int] = set()
        for line in sorted(wanted):
            func = _function_at(source, line)
            if func is None:
                continue
            found = [t for t in self.triggers(func, source, dynamic=True) if source.line(t.node) <= line <= source.end_line(t.statement)]
            if not found:
                found = self.fallback(func, line, source)
            if not found:
                continue
            owner = _top_level(source, func)
            site = next((s for s in sites if any(_top_level(source, f) is owner for f in s.compiled)), None)
            if site is not None:
                if id(site.statement) in handled:
                    continue
                handled.add(id(site.statement))
                if self.setting in (_wrapper_settings(site.wrapper) if site.wrapper else set()):
                    continue
                everything = [t for f in site.compiled for t in self.triggers(f, source, dynamic=True)]
                outcomes.append(self._at_site(site, everything or found, source, ctx))
                continue
            outcomes.append(self._outside(found, func, source))
        # The setting applies to the whole compiled call: where it would not help at one break
        # of this file, it is not proposed for the others either.
        hopeless = [o for o in outcomes if isinstance(o, Decline)]
        if hopeless:
            first = hopeless[0]
            outcomes = [
                o if not (isinstance(o, Fix) and o.safety is Safety.DISPLAY_ONLY) else
                Decline(rule=self.code, file=o.file, line=o.line, fingerprint=o.fingerprint,
                        reason=f"{self.setting} would apply to line {first.line} too, where it would not help: {first.reason}")
                for o in outcomes
            ]
        return _suppressed(outcomes, source, self.code)

    def fallback(self, func: cst.FunctionDef, line: int, source: SourceFile) -> list[Trigger]:
        """Triggers for a reported break whose statement shows none of this rule's patterns."""
        return []

    def _at_site(self, site: CompileSite, found: list[Trigger], source: SourceFile, ctx: RuleContext) -> Outcome:
        for trig in found:
            func = source.enclosing(trig.node, (cst.FunctionDef,))
            why = hopeless_use(trig, func, source) if isinstance(func, cst.FunctionDef) else None  # type: ignore[arg-type]
            if why:
                return self.decline(source, site.statement, f"{self.setting} would not help: {why}; a captured value "
                                    "there still breaks the graph or recompiles for every value")
        # Two edits, not one diff: the helper (identical for GM501 and GM502, so the engine merges
        # it) and the compile site itself (so two settings for one site overlap there, and the
        # second joins the first wrapper on the next round instead of stacking a second one).
        tree = source.with_helper(source.module, WRAPPER, WRAPPER_CODE.format(wrapper=WRAPPER, torch=source.torch_name() or "torch").lstrip("\n"))
        if source.torch_name() is None:
            tree = source.with_import(tree)
        edits = source.edits_to(tree) + (self._site_edit(site, source),)
        lines = ", ".join(str(source.line(t.node)) for t in found[:5])
        notes = (f"captures the {self.what} at line(s) {lines}; every call of `{site.shown}` runs under "
                 f"torch._dynamo.config.patch({self.setting}=True), so a recompilation keeps it too; unbacked "
                 "sizes can recompile: `graphmend verify` counts recompilations")
        if not ctx.verified:
            notes += "; unverified: found by reading the source"
        line = source.line(site.statement)
        return Fix(
            rule=self.code,
            title=f"Run every call of `{site.shown}` with torch._dynamo.config.{self.setting}=True",
            safety=Safety.SAFE if ctx.verified else Safety.UNSAFE,
            edits=tuple(sorted(edits, key=lambda e: (e.start_line, e.end_line))),
            file=source.path,
            line=line,
            fingerprint=fingerprint(source.path, source.function_name(site.statement), self.code, source.lines[line - 1]),
            notes=notes,
        )

    def _site_edit(self, site: CompileSite, source: SourceFile) -> Edit:
        setting = f"{self.setting}=True"
        if site.wrapper is not None:
            last = site.wrapper.args[-1].value
            return wrap_text(source, last, "", f", {setting}")
        if isinstance(site.statement, cst.FunctionDef):
            line = source.line(site.compile_call)  # type: ignore[arg-type]
            text = source.lines[line - 1]
            indent = text[: len(text) - len(text.lstrip())]
            return Edit(source.path, line, line, f"{indent}@{WRAPPER}({setting})\n{text}", text)
        assert isinstance(site.statement, cst.Assign)
        return wrap_text(source, site.statement.value, f"{WRAPPER}(", f", {setting})")

    def _outside(self, found: list[Trigger], func: cst.FunctionDef, source: SourceFile) -> Outcome:
        trig = found[0]
        why = hopeless_use(trig, func, source)
        if why:
            return self.decline(source, trig.statement, f"{self.setting} would not help: {why}; a captured value there "
                                "still breaks the graph or recompiles for every value")
        where = source.function_name(trig.node)
        instruction = (
            f"the compile site of `{where}` is not in this file: where it is compiled, run every call under the "
            f"setting, e.g. `compiled = {WRAPPER}(torch.compile(model), {self.setting}=True)` (the helper is in "
            f"`graphmend explain {self.code}`), or `with torch._dynamo.config.patch({self.setting}=True): "
            "out = compiled(*args)` around each call; a patch around torch.compile() alone does nothing, and a "
            "recompilation outside the patch brings the break back. To prove it on the target (breaks, outputs, "
            f"recompilations), add `dynamo_config: [{self.setting}]` to the target in graphmend.yml and run "
            "`graphmend check` / `graphmend verify`"
        )
        return Fix(
            rule=self.code,
            title=f"Compile with torch._dynamo.config.{self.setting}=True around every call",
            safety=Safety.DISPLAY_ONLY,
            edits=(),
            file=source.path,
            line=source.line(trig.statement),
            fingerprint=self.decline(source, trig.statement, "").fingerprint,
            notes=instruction,
        )


def _suppressed(outcomes: list[Outcome], source: SourceFile, code: str) -> list[Outcome]:
    out: list[Outcome] = []
    for o in outcomes:
        if not isinstance(o, Suppressed) and source.suppressed(o.line, code):
            out.append(Suppressed(rule=code, file=source.path, line=o.line))
        else:
            out.append(o)
    return out


def _function_at(source: SourceFile, line: int) -> Optional[cst.FunctionDef]:
    best = None
    for node in A._iter(source.module):
        if isinstance(node, cst.FunctionDef) and source.line(node) <= line <= source.end_line(node):
            best = node  # innermost last (pre-order)
    return best


def _top_level(source: SourceFile, node: cst.CSTNode) -> cst.CSTNode:
    cur = node
    while source.parent(cur) is not None and source.parent(cur) is not source.module:
        cur = source.parent(cur)  # type: ignore[assignment]
    return cur


def statement_of(node: cst.CSTNode, source: SourceFile) -> cst.CSTNode:
    return _statement_of(node, source)
