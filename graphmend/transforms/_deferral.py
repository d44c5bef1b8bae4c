"""What the three deferred-side-effect rules (GM201 print, GM202 logging, GM203 warnings) share.

A rule names the calls it recognises (:meth:`DeferredCallRule.classify`); this base proves that
one can be deferred and writes the fix. The rewrite only wraps the *callee*::

    logger.warning("x is %s", x)
    _graphmend_deferred(logger.warning, "log", 12, "forward")("x is %s", x)

In eager mode ``_graphmend_deferred`` returns ``logger.warning`` itself, so the call runs exactly
as before, from the same line. Under ``torch.compile`` it returns a recorder that copies the
arguments into the graph's side effects; the boundary (``_boundary.py``) replays the call after
the compiled call with the original location (line 12, function ``forward``, this file). Only
the callee's text changes and no line is added, so every location in the file stays put.

Legality, each failing condition a Decline: the call is a statement of its own (its result is
unused: a recorder has nothing to return); it runs inside a function; its arguments do not
name the caller's location (``stacklevel``, ``stack_info``); the name is the real ``print`` /
logger / ``warnings`` (not rebound). Safety: ``safe`` when a boundary is proven to run after the
region (the call is inside a module class of this file that defines ``forward``, a module-level
function such a class calls, or a function compiled here) and nothing in the region may raise
after the call (where only some entries may, the call is recorded under the others only:
``entries=``), nor while Dynamo traces it, unless the runtime makes the call from a failed trace
(``_deferral_entries.trace_faults``, ``shown_from_trace``); otherwise ``unsafe``, and
without a boundary the fix is the ``is_compiling()`` guard instead (messages skipped under
compile, which the notes say).

A call in a file with no such boundary (a mixin's method, a utility) may still be ``safe`` in
dynamic mode, recorded only under the compiled entries of other files of the package that the
stacks of its breaks name and whose code after the call was read (``_deferral_entries``):
``entries=(__name__.rsplit('.', 2)[0] + '.models.x.modeling_x.XModel',)``. Without ``entries=``
a call records only under an entry of its own file. Output that stays immediate makes a site
``unsafe`` (it would come out before the deferred output although it ran after it): an output
call that cannot be deferred, a helper of this file that prints, a call after it in its function
of a function handed in as an argument (``fn(y)``: ``_callback.unread_after``), or (dynamic mode)
a call that ran into an output break of another file when the target ran. Not judged (a known
limit): other code this analysis does not read after the call in the same region (another file's
function or module, a callable an instance holds that this file does not show), whose output
stays immediate too.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import libcst as cst

from graphmend.model import Category, Decline, Fix, Safety, fingerprint
from graphmend.transforms import _boundary as B
from graphmend.transforms import _region as R
from graphmend.transforms._analysis import dotted
from graphmend.transforms._callback import unread_after
from graphmend.transforms._deferral_entries import (failure_after, foreign_entries, logger_method, made_in_graph,
                                                    shown_from_trace, trace_faults)
from graphmend.transforms.base import RuleContext, SourceFile, Transform, iter_nodes


class DeferredCallRule(Transform):
    """Base of GM201-GM203 (no ``code``: the registry skips it)."""

    categories = (Category.SIDE_EFFECT,)
    safety = Safety.SAFE

    # -- for subclasses ---------------------------------------------------------------------

    def classify(self, call: cst.Call, source: SourceFile) -> Optional[str]:
        """The replay kind for a call this rule handles (``call``/``log``/``root-log``/``warn``), or None."""
        raise NotImplementedError

    def refuse(self, call: cst.Call, source: SourceFile, kind: str) -> Optional[str]:
        """A reason this particular call cannot be deferred (argument checks), or None."""
        return None

    # -- the Transform contract -------------------------------------------------------------

    def prefilter(self, text: str) -> bool:
        return any(word in text for word in ("print", "logg", "warn"))

    def sites(self, source: SourceFile) -> Iterable[cst.CSTNode]:
        for call in iter_nodes(source.module, (cst.Call,)):
            if self.classify(call, source) is not None:  # type: ignore[arg-type]
                yield call

    def site_lines(self, node: cst.CSTNode, source: SourceFile) -> range:
        return range(source.line(node), source.end_line(node) + 1)

    def rewrite(self, node: cst.CSTNode, source: SourceFile, ctx: RuleContext) -> Union[Fix, Decline]:
        assert isinstance(node, cst.Call)
        call = node
        kind = self.classify(call, source)
        assert kind is not None
        shown = _short(source.code(call.func))
        parent = source.parent(call)
        if not isinstance(parent, cst.Expr):
            return self.decline(source, call, f"the result of {shown}(...) is used; a deferred call has no result to give back")
        func = B.enclosing_function(source, call)
        if func is None:
            return self.decline(source, call, f"{shown}(...) runs at module level, outside any compiled region")
        if any(isinstance(a.value, (cst.Await,)) for a in call.args):
            return self.decline(source, call, "an argument awaits; it cannot be recorded")
        if any(a.star for a in call.args) and kind in ("log", "root-log", "warn"):
            return self.decline(source, call, f"{shown}(...) takes *args/**kwargs; which argument is the level, message or stacklevel is unknown")
        reason = self.refuse(call, source, kind)
        if reason:
            return self.decline(source, call, reason)
        placement = B.plan(source, call)
        # a call the runtime makes from a failed trace: what may fail while tracing after it is no reason
        traced = not shown_from_trace(call, kind, source, ctx.root)
        foreign: tuple[str, ...] = ()
        # under the entries of other files: a call the op makes in the graph, no record before it
        in_graph = False
        if not placement.proven:
            found = foreign_entries(source, call, ctx, not traced)
            if isinstance(found, str):
                return self._guard_fix(call, source, shown, placement, found)
            foreign, in_graph = found
            placement = B.Placement(True, f"the forward of the compiled entry in another file of the package "
                                          f"({', '.join(_entry_shown(e) for e in foreign)})")
        line = B.call_line(source, call)
        function = B.code_name(source, call)
        if kind == "call":
            suffix = f', "{kind}")'
        else:
            suffix = f', "{kind}", {line}, "{function}")'
        runtime = B.runtime_edits(source, ctx, call)
        if isinstance(runtime, str):
            return self.decline(source, call, runtime)
        edits = (B.wrap_text(source, call.func, f"{B.DEFERRED}(", suffix),) + runtime[0]
        raises = R.region_may_raise(source, call)
        faults, entries = R.entry_faults(source, call)
        if traced and (made_in_graph(call, kind, source, ctx.root) or logger_method(call, kind)):
            # A call given a tensor, made in the graph, or a Logger's method the runtime cannot
            # name (a record): lost when the trace after it fails, after it in its function or
            # under an entry that runs more after it.
            own, more = trace_faults(source, call)
            raises = raises or own
            faults = {**more, **faults}
            entries = tuple(e for e in entries if e not in faults)
        if foreign:
            # Recorded only under the entries of other files whose code was read (and under none
            # of this file's: no boundary here is proven to run after the call).
            edits = (B.wrap_text(source, call.func, f"{B.DEFERRED}(", suffix[:-1] + f", entries=({', '.join(foreign)},))"),) \
                + runtime[0]
            raises = failure_after(source, call, traced, values=not in_graph)
            faults = {}
        raises = raises or R.caught_around(source, call)
        if faults and not raises:
            if entries:
                # Recorded only under the entries where nothing may fail after the call.
                edits = (B.wrap_text(source, call.func, f"{B.DEFERRED}(", suffix[:-1] + f", entries={B.entries_text(entries)})"),) + runtime[0]
                notes_entries = (f" Under a compiled {', '.join(sorted(faults))}, the call runs as written (it may fail after "
                                 f"the call in the same graph: {next(iter(faults.values()))}).")
            else:
                raises = next(iter(faults.values()))
        module = source.path[:-3].replace("/", ".") if source.path.endswith(".py") else source.path
        notes = (
            f"Eager mode runs {shown}(...) as written. Under torch.compile it is recorded with its "
            f"arguments copied and replayed after the compiled call by the boundary on {placement.where}. "
            f"If the callable you compile is defined elsewhere and calls into this module, wrap it "
            f"(`compiled = {module}._graphmend_boundary(torch.compile(fn))`); otherwise the next call of one "
            f"of this module's forwards outside a compiled region raises an error naming the records "
            f"that were never replayed (it never replays them into the wrong call)."
        )
        if foreign:
            notes = (
                f"Eager mode runs {shown}(...) as written. Under torch.compile, when the compiled entry is "
                f"{placement.where[placement.where.index('(') + 1:-1]} (a module class of another file of the package, "
                f"which the runtime makes a boundary when it is defined; its code after the call was read and may not "
                f"fail), it is recorded with its arguments copied and replayed after the compiled call; under any "
                f"other entry it runs as written."
            )
            if in_graph:
                notes = notes.replace("its code after the call was read and may not fail), it is recorded with its "
                                      "arguments copied and replayed after the compiled call",
                                      "its code before the call was read and makes no record), it is made in the "
                                      "graph by the op graphmend::deferred, its arguments constants or sizes: an op "
                                      "after it that fails when the graph runs comes after it, and a trace that fails "
                                      "after it makes it first, as the original did")
        if faults and not raises:
            notes += notes_entries
        safety = Safety.SAFE
        if raises:
            safety = Safety.UNSAFE
            notes += f" Unsafe: {raises}."
        immediate = _immediate_output(source, call, func, ctx.reached)
        if immediate:
            safety = Safety.UNSAFE
            notes += (f" Unsafe: {immediate} in the same function stays immediate, so under compile it may "
                      f"appear before this deferred output although it ran after it.")
        unread = unread_after(source, call)
        if unread and not immediate:
            safety = Safety.UNSAFE
            notes += (f" Unsafe: {unread}, after the call in the same compiled region: code this analysis does not "
                      "read, whose own output (its file is not rewritten) would appear before this deferred output "
                      "although it ran after it.")
        return Fix(
            rule=self.code,
            title=f"defer {shown}(...) out of the compiled region",
            safety=safety,
            edits=edits,
            file=source.path,
            line=source.line(call),
            fingerprint=self._fingerprint(source, call),
            notes=notes,
            files=runtime[1],
        )

    # -- the fallback when no boundary is proven ---------------------------------------------

    def _guard_fix(self, call: cst.Call, source: SourceFile, shown: str, placement: B.Placement,
                   foreign: str = "") -> Union[Fix, Decline]:
        stmt = source.parent(source.parent(call))
        torch = source.torch_name()
        why_not = placement.why_not + (f" (a compiled entry in another file is not proven either: {foreign})" if foreign else "")
        placement = B.Placement(False, placement.where, why_not)
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or torch is None:
            return self.decline(source, call, placement.why_not)
        expr = stmt.body[0]
        edit = B.wrap_text(source, expr, f"if not {torch}.compiler.is_compiling(): ", "")
        return Fix(
            rule=self.code,
            title=f"skip {shown}(...) under torch.compile",
            safety=Safety.UNSAFE,
            edits=(edit,),
            file=source.path,
            line=source.line(call),
            fingerprint=self._fingerprint(source, call),
            notes=(
                f"Unsafe: under torch.compile {shown}(...) no longer runs at all (its output is lost); "
                f"eager mode is unchanged. To keep the output instead: {placement.why_not}."
            ),
        )

    def _fingerprint(self, source: SourceFile, node: cst.CSTNode) -> str:
        line = source.line(node)
        return fingerprint(source.path, source.function_name(node), self.code, source.lines[line - 1])


OUTPUT_NAMES = frozenset({"print", "warn", "debug", "info", "warning", "error", "exception", "critical", "fatal", "log",
                          "warning_once", "info_once"})


def _immediate_output(source: SourceFile, call: cst.Call, func: cst.FunctionDef,
                      reached: tuple[tuple[int, str], ...] = ()) -> Optional[str]:
    """Another output in the same function that stays immediate while the deferred ones wait, so
    under compile it would appear out of order: an output call that cannot be deferred (its
    result is used, or it names a frame of the stack), a direct write to ``sys.stdout`` /
    ``sys.stderr``, a call of a helper function of this file that prints without a boundary
    of its own (its output call is never deferred), or (dynamic mode: ``reached``) a call that ran
    into an output break of another file when the target ran."""
    return _immediate_in(source, func, call, set(), reached)


def _immediate_in(source: SourceFile, func: cst.FunctionDef, call: Optional[cst.Call], seen: set[str],
                  reached: tuple[tuple[int, str], ...] = ()) -> Optional[str]:
    helpers = {stmt.name.value: stmt for stmt in source.module.body if isinstance(stmt, cst.FunctionDef)}
    for other in iter_nodes(func, (cst.Call,)):
        if other is call:
            continue
        callee = other.func
        where = f"at line {source.line(other)}"
        if dotted(callee).split(".")[-2:] in (["stdout", "write"], ["stderr", "write"]):
            return f"`{_short(source.code(callee))}(...)` {where}"
        elsewhere = next((out for line, out in reached if line == B.call_line(source, other)), None)
        if elsewhere is not None:
            # An output of another file this call ran into when the target ran: it stays
            # immediate, so it would come out before this file's deferred output.
            return f"`{_short(source.code(callee))}(...)` {where} (it reached the output at {elsewhere}, which is not deferred)"
        if isinstance(callee, cst.Name) and callee.value in helpers and callee.value not in seen:
            helper = helpers[callee.value]
            seen.add(callee.value)
            inner = _immediate_in(source, helper, None, seen, reached)
            if inner is None and any(_is_output(c) and not B.plan(source, c).proven for c in iter_nodes(helper, (cst.Call,))):
                inner = "an output call with no boundary to defer it to"
            if inner:
                return f"`{callee.value}(...)` {where} (it reaches {inner})"
            continue
        if not _is_output(other):
            continue
        used = not isinstance(source.parent(other), cst.Expr)
        stack = any(a.keyword is not None and a.keyword.value in ("stacklevel", "stack_info") for a in other.args)
        if used or stack:
            return f"`{_short(source.code(callee))}(...)` {where}"
    return None


def _is_output(call: cst.Call) -> bool:
    callee = call.func
    leaf = callee.attr.value if isinstance(callee, cst.Attribute) else getattr(callee, "value", "")
    if leaf not in OUTPUT_NAMES or (isinstance(callee, cst.Name) and leaf not in ("print", "warn")):
        return False
    return not isinstance(callee, cst.Call)


def _entry_shown(expression: str) -> str:
    """``LayoutLMv3Model`` for an ``entries=`` expression naming a class of another file."""
    return expression.rsplit(".", 1)[-1].rstrip("'\"")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."


def keyword(call: cst.Call, name: str) -> Optional[cst.Arg]:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def is_int_literal(arg: Optional[cst.Arg], value: int) -> bool:
    return arg is not None and isinstance(arg.value, cst.Integer) and arg.value.evaluated_value == value


def imported_names(source: SourceFile, module: str) -> tuple[set[str], dict[str, str]]:
    """Module-level ``import module [as m]`` names, and ``from module import x [as y]`` (y -> x)."""
    modules: set[str] = set()
    members: dict[str, str] = {}
    for stmt in source.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if dotted(alias.name) == module:
                        modules.add(alias.asname.name.value if alias.asname else module)  # type: ignore[union-attr]
            elif isinstance(small, cst.ImportFrom) and small.module is not None and dotted(small.module) == module:
                if isinstance(small.names, cst.ImportStar):
                    continue
                for alias in small.names:
                    real = dotted(alias.name)
                    members[alias.asname.name.value if alias.asname else real] = real  # type: ignore[union-attr]
    return modules, members
