# ----------------------------------------------------------------------------------------------
# graphmend runtime: deferred side effects (GM201-GM203) and trap lowering (GM301, GM302).
# Added by `graphmend fix`; it needs torch only. In eager mode every rewritten call runs exactly
# as written. Under torch.compile, print / warnings.warn / logging.<level> calls, and the methods
# of a logger that logging.getLogger returns, are made in the graph by an ordered effectful op
# when the graph runs (before a later op of it can fail); another logger's method, arguments the
# op cannot carry, and every call after those in the region are
# recorded inside the graph (arguments copied at the call) and replayed in order, with their
# original source location, by the boundary installed on the rewritten module's forward methods
# once the compiled call has returned. A trace that fails (a shape that does not fit, found by
# Dynamo before any op runs) builds no graph: the boundary makes the calls the op saw while that
# trace ran, when their arguments held no tensor, before the error propagates, as the original
# (whose call broke the graph) made them before the trace of the rest began.
# A raise under a tensor condition becomes an in-graph
# torch._assert_async on CPU; the boundary turns its RuntimeError back into the original
# exception type and message.
# A rewritten module ends with `_graphmend_install(globals())`, which gives it the names its call
# sites use and makes its module classes boundaries.
import builtins as _graphmend_builtins
import dataclasses as _graphmend_dataclasses
import functools as _graphmend_functools
import logging as _graphmend_logging
import sys as _graphmend_sys

import torch as _graphmend_torch


def _graphmend_shared_runtime():
    # One runtime for every rewritten module: whichever boundary of a thread runs replays what
    # that thread recorded.
    runtime = _graphmend_sys.modules.get("_graphmend_runtime")
    if runtime is None:
        import types

        class Record:
            # A chain, not a list: Dynamo guards on a list's length and would recompile the
            # graph on every call; a new object linked to the old head is guarded by type only.
            __slots__ = ("replay", "previous")

            def __init__(self, replay, previous):
                self.replay = replay
                self.previous = previous

        runtime = types.ModuleType("_graphmend_runtime")
        runtime.Record = Record
        _graphmend_sys.modules["_graphmend_runtime"] = runtime
    if not hasattr(runtime, "region"):
        import threading

        # Per thread (a plain threading.local: Dynamo guards on what a graph reads from it per
        # thread and applies a graph's writes to it; it mishandles writes to a subclass):
        # depth (boundaries running in this thread), bounded (whether the innermost one started
        # the compiled region entered now), entry (that region's ``module.Class`` /
        # ``module.function``, if named), and the thread's record chain from head to root. Set
        # by :func:`_graphmend_region` before a thread's first boundary runs; read with defaults.
        runtime.region = threading.local()
    return runtime


_graphmend_runtime = _graphmend_shared_runtime()
_graphmend_trap_prefix = "graphmend-trap:"
_graphmend_levels = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40,
                     "exception": 40, "critical": 50, "fatal": 50}


class _GraphmendCopied:
    # A value copied inside the graph and rebuilt at the replay (in eager mode): a Parameter
    # (printed as "Parameter containing:"), a dataclass (its fields copied, its __init__ not rerun).
    __slots__ = ("kind", "cls", "value", "extra")

    def __init__(self, kind, cls, value, extra):
        self.kind = kind
        self.cls = cls
        self.value = value
        self.extra = extra


def _graphmend_snapshot(value):
    # Copied at the call: a tensor changed in place later in the region is shown as it was.
    if isinstance(value, _graphmend_torch.nn.Parameter):
        return _GraphmendCopied("parameter", type(value), value.detach().clone(), value.requires_grad)
    if isinstance(value, _graphmend_torch.Tensor):
        return value.detach().clone()
    if type(value) in (list, tuple):
        return type(value)(_graphmend_snapshot(item) for item in value)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple
        return type(value)(*(_graphmend_snapshot(item) for item in value))
    if type(value) is dict:
        return {key: _graphmend_snapshot(item) for key, item in value.items()}
    if _graphmend_dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple((f.name, _graphmend_snapshot(getattr(value, f.name))) for f in _graphmend_dataclasses.fields(value))
        return _GraphmendCopied("dataclass", type(value), fields, None)
    return value


def _graphmend_rebuild(value):
    # The replay's view of a snapshot: the same types the call was made with.
    if isinstance(value, _GraphmendCopied):
        if value.kind == "parameter":
            return _graphmend_torch.nn.Parameter(value.value, requires_grad=value.extra)
        rebuilt = object.__new__(value.cls)
        for name, item in value.value:
            object.__setattr__(rebuilt, name, _graphmend_rebuild(item))
        return rebuilt
    if type(value) in (list, tuple):
        return type(value)(_graphmend_rebuild(item) for item in value)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return type(value)(*(_graphmend_rebuild(item) for item in value))
    if type(value) is dict:
        return {key: _graphmend_rebuild(item) for key, item in value.items()}
    return value


class _GraphmendWhere:
    # The rewritten module a deferred call is in: its file (the location replayed) and its
    # globals (the warnings registry shared with its eager calls).
    __slots__ = ("file", "namespace")

    def __init__(self, file, namespace):
        self.file = file
        self.namespace = namespace


def _graphmend_bounded():
    # Whether a boundary started the compiled call being traced: only then is there one to replay
    # records (or restore a trap) right after it. A compiled entry that is not a boundary (a lambda
    # or torch container around the module, a function of another file) only inlines the
    # boundaries it calls; one entered beneath a boundary that runs eagerly is no boundary's
    # region. Dynamo guards on the value: a graph traced under a boundary is not reused without one.
    return getattr(_graphmend_runtime.region, "bounded", False)


def _graphmend_entry():
    # The entry of the compiled region being traced, as the boundary that started it named it
    # (None: no boundary started it, or one that names no entry).
    return getattr(_graphmend_runtime.region, "entry", None) if _graphmend_bounded() else None


def _graphmend_region():
    """This thread's runtime state (eager code only), its fields set on the thread's first use."""
    region = _graphmend_runtime.region
    if getattr(region, "root", None) is None:
        region.depth, region.bounded, region.entry, region.recorded = 0, False, None, False
        region.head = region.root = _graphmend_runtime.Record(None, None)
    return region


_graphmend_categories = (UserWarning, DeprecationWarning, FutureWarning, PendingDeprecationWarning, RuntimeWarning,
                         SyntaxWarning, ImportWarning, UnicodeWarning, BytesWarning, ResourceWarning, Warning)


def _graphmend_ingraph_op():
    """The effectful op ``graphmend::deferred`` (eager code only): defined once per process,
    whichever stamped copy of the runtime comes first; None where this torch lacks the ordered
    effects API (deferred calls then use the record replayed by the boundary)."""
    runtime = _graphmend_runtime
    if hasattr(runtime, "op"):
        return runtime.op
    runtime.op = None
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op
    except ImportError:
        return None
    op = getattr(_graphmend_torch.ops.graphmend, "deferred", None)
    if op is None:
        @_graphmend_torch.library.custom_op("graphmend::deferred", mutates_args=(), schema=(
            "(str[] site, str[] tags, str[] strs, SymInt[] ints, float[] floats, Tensor[] tensors) -> ()"))
        def deferred(site, tags, strs, ints, floats, tensors):
            _graphmend_perform(site, tags, strs, ints, floats, tensors)

        @deferred.register_fake
        def _(site, tags, strs, ints, floats, tensors):
            _graphmend_traced(site, tags, strs, ints, floats, tensors)

        op = _graphmend_torch.ops.graphmend.deferred.default
        _register_effectful_op(op, _EffectType.ORDERED)  # kept in the graph, in program order
    runtime.op = op
    return op


def _graphmend_encode(value, out):
    # Traced by Dynamo: ``value`` as op arguments (tags, strs, ints, floats, tensors), or False
    # for a value that is none of: None/bool/int/float/str, a plain tensor or Parameter, a
    # torch.Size, list/tuple/dict of them, a vetted warning category.
    tags, strs, ints, floats, tensors = out
    if value is None:
        tags.append("n")
    elif type(value) is bool:
        tags.append("b")
        ints.append(1 if value else 0)
    elif type(value) is int:
        tags.append("i")
        ints.append(value)
    elif type(value) is float:
        tags.append("f")
        floats.append(value)
    elif type(value) is str:
        tags.append("s")
        strs.append(value)
    elif isinstance(value, _graphmend_torch.Tensor):
        if type(value) is _graphmend_torch.nn.Parameter:
            tags.append("P")
            ints.append(1 if value.requires_grad else 0)
        elif type(value) is _graphmend_torch.Tensor:
            tags.append("t")
        else:
            return False
        tensors.append(value.detach())  # as the snapshot: shown as a tensor, copied at run time
    elif type(value) in (list, tuple, _graphmend_torch.Size):
        tags.append("S" if type(value) is _graphmend_torch.Size else "L" if type(value) is list else "T")
        ints.append(len(value))
        for item in value:
            if not _graphmend_encode(item, out):
                return False
    elif type(value) is dict:
        tags.append("D")
        ints.append(len(value))
        for key, item in value.items():
            if not (_graphmend_encode(key, out) and _graphmend_encode(item, out)):
                return False
    else:
        for index, category in enumerate(_graphmend_categories):
            if value is category:
                tags.append("c")
                ints.append(index)
                return True
        return False
    return True


def _graphmend_shows_grad(value):
    # Traced by Dynamo: whether ``value`` holds (in lists, tuples, namedtuples, dicts) a plain
    # tensor that requires grad, whose text shows ``grad_fn=`` or ``requires_grad=True``.
    if isinstance(value, _graphmend_torch.Tensor):
        return value.requires_grad and type(value) is not _graphmend_torch.nn.Parameter
    if isinstance(value, (list, tuple)):
        for item in value:
            if _graphmend_shows_grad(item):
                return True
    if type(value) is dict:
        for key, item in value.items():
            if _graphmend_shows_grad(key) or _graphmend_shows_grad(item):
                return True
    return False


@_graphmend_torch.compiler.disable
def _graphmend_now(callee, kind, line, function, where, args, kwargs):
    """The deferred call made now, in eager mode (Dynamo breaks the graph to call this), with the
    original's location and rules: after every call recorded before it in the region."""
    region = _graphmend_region()
    if region.head is not region.root:
        _graphmend_flush()
    return _graphmend_replay(callee, kind, line, function, where, args, kwargs)


def _graphmend_decode(tags, values):
    # The value encoded by _graphmend_encode; ``values`` maps a kind of value to its iterator.
    tag = next(tags)
    if tag == "n":
        return None
    if tag in "bifst":
        value = next(values["ifst".find(tag) if tag != "b" else 0])
        return bool(value) if tag == "b" else value.clone() if tag == "t" else value
    if tag == "P":
        grad = bool(next(values[0]))
        return _graphmend_torch.nn.Parameter(next(values[3]).clone(), requires_grad=grad)
    if tag == "c":
        return _graphmend_categories[next(values[0])]
    count = next(values[0])
    if tag == "D":
        return dict((_graphmend_decode(tags, values), _graphmend_decode(tags, values)) for _ in range(count))
    items = [_graphmend_decode(tags, values) for _ in range(count)]
    return items if tag == "L" else _graphmend_torch.Size(items) if tag == "S" else tuple(items)


def _graphmend_perform(site, tags, strs, ints, floats, tensors):
    # graphmend::deferred at graph run time: the call, made now, where the original made it
    # (before a later op of the graph fails), with the location and rules of the replay.
    kind, file, line, function, target, method = site
    values = (iter(ints), iter(floats), iter(strs), iter(tensors))
    tags = iter(tags)
    args, kwargs = _graphmend_decode(tags, values), _graphmend_decode(tags, values)
    if target == "print":
        callee = _graphmend_builtins.print
    elif target == "warn":
        import warnings

        callee = warnings.warn
    elif target == "logger":
        # The method looked up now, as the original did at its call (a Logger subclass's
        # override, transformers' warning_once patched onto logging.Logger).
        method, _, key = method.partition(":")
        callee = getattr(_graphmend_runtime.loggers[key], method)
    else:
        callee = getattr(_graphmend_logging, method)
    where = _graphmend_runtime.wheres[file]
    _graphmend_replay(callee, kind, int(line), function, where, args, kwargs)


def _graphmend_traced(site, tags, strs, ints, floats, tensors):
    # The op's fake kernel, run while Dynamo traces the call (and again by AOTAutograd and
    # Inductor on the finished graph: those runs are not the program's). A trace that fails
    # (a shape that does not fit, an int index out of range) builds no graph, so the op never
    # runs; the boundary shows what this attempt of the compile recorded before the error
    # (:func:`_graphmend_show_traced`), as the original, whose call broke the graph, made it
    # before the trace of the rest began. A call given a tensor (its value is not known while
    # tracing) or a size without a hint cannot be shown: it ends what may be shown.
    try:
        from torch._dynamo.utils import get_fake_value
        from torch._guards import CompileContext
    except ImportError:
        return
    context = CompileContext.try_get()
    frame, tracing = _graphmend_sys._getframe(1), False
    for _ in range(64):  # Dynamo's get_fake_value is a few frames up; the backends' are not
        if frame is None:
            break
        if frame.f_code is get_fake_value.__code__:
            tracing = True
            break
        frame = frame.f_back
    if context is None or context.compile_id is None or not tracing:
        return
    region = _graphmend_runtime.region
    traced = getattr(region, "traced", None)
    if traced is None:
        traced = region.traced = []
    compile_id, attempt = str(context.compile_id), context.attempt
    # Dynamo restarts the analysis of a frame (after a graph break) from its start: the calls of
    # an earlier attempt are traced again.
    traced[:] = [t for t in traced if t[0] != compile_id or t[1] == attempt]
    known = []
    for value in (*ints, *floats):
        if isinstance(value, (_graphmend_torch.SymInt, _graphmend_torch.SymFloat)):
            # A size of the inputs being traced: its hint is its value in this call (an unbacked
            # one, read from a tensor, has none).
            value = getattr(value.node, "hint", None)
        known.append(value)
    shown = not tensors and None not in known
    payload = (list(site), list(tags), list(strs), known[:len(ints)], known[len(ints):]) if shown else None
    traced.append((compile_id, attempt, payload))


def _graphmend_traced_failure(error):
    # The compile id of a compile that failed after Dynamo traced the frame and raised to the
    # program, or None. Such a failure is found while tracing (a fake-tensor error, an int index
    # out of range) or by the backend given the traced graph (BackendCompilerFailed: a backend
    # lacking an op): the graph never runs, and the original made the calls that broke its graph
    # before that compile. Dynamo sets the compile id on every error its compile raises. None for
    # an error the graph or eager code raised (whose calls were made) and for Dynamo's other
    # refusals (fullgraph's graph break), which fail before the original's output too. Under
    # suppress_errors the failed frame runs eagerly instead, makes its calls, and returns: the
    # boundary forgets the trace's records then.
    compile_id = getattr(error, "compile_id", None)
    if compile_id is None:
        return None
    try:
        from torch._dynamo.exc import BackendCompilerFailed, TorchDynamoException, TorchRuntimeError
    except ImportError:
        return None
    if isinstance(error, TorchDynamoException) and not isinstance(error, (TorchRuntimeError, BackendCompilerFailed)):
        return None
    return str(compile_id)


def _graphmend_show_traced(error):
    """Make the calls the failed trace of ``error`` recorded, oldest first, up to the first that
    cannot be shown; forget the rest (eager code only)."""
    region = _graphmend_runtime.region
    traced = getattr(region, "traced", None)
    if not traced:
        return
    failed = _graphmend_traced_failure(error)
    shown = [t for t in traced if t[0] == failed]
    traced[:] = [t for t in traced if t[0] != failed]
    for _, _, payload in shown:
        if payload is None:
            break
        _graphmend_perform(*payload, [])


_graphmend_method_type = id(type(_graphmend_logging.root.warning))  # types.MethodType


def _graphmend_target(callee, kind):
    # Traced by Dynamo: (target, method[, logger]) naming ``callee`` by constants, None (a
    # method of a logger that logging.getLogger does not return, a callee of no known kind), or
    # False (a logger attribute that is not a bound method: made at a graph break).
    if kind == "call" and callee is _graphmend_builtins.print:
        return "print", ""
    if kind == "warn":
        import warnings

        return ("warn", "") if callee is warnings.warn else None
    if kind == "root-log":
        for method in (*_graphmend_levels, "log"):
            if callee is getattr(_graphmend_logging, method, None):
                return "root-log", method
        return None
    if kind in ("log", "call") and _graphmend_logger_key is not None:
        if id(callee.__class__) != _graphmend_method_type:
            # Not a bound method: something set on the logger object (``logger.warning = f``)
            # hides the class's method; what it does is the program's: False, made as written
            # at a graph break. Read by id() (guarded: such a patch made between calls
            # recompiles); isinstance() and hasattr() break the graph on a logger's method.
            return False
        # A bound method: the rules write kind "log" for a logger's method, "call" for print and
        # for transformers' warning_once / info_once (Dynamo cannot trace hasattr() on a Logger's
        # method: its attributes are read as they are). Dynamo knows the bound logger only as an
        # object of its type, and not the method's name: id() guards on the identity of each (a
        # graph traced for one logger is not reused for another) and gives the constants the
        # key, computed while tracing, names them by.
        key = _graphmend_logger_key(id(callee.__self__), id(callee.__func__))
        return ("logger", key) if key else None
    return None


def _graphmend_logger_key_of(owner, function):
    # "<method>:<key>" for the logger whose id is ``owner`` if logging.getLogger returns it (the
    # root, or one of the manager's: kept alive for the process, so its id names no other object)
    # and a method of its class is the function whose id is ``function``; else "". Run on the
    # real objects while Dynamo traces: the result is a constant of the graph.
    found = _graphmend_logging.root if id(_graphmend_logging.root) == owner else None
    for logger in list(_graphmend_logging.Logger.manager.loggerDict.values()):
        if found is None and id(logger) == owner and isinstance(logger, _graphmend_logging.Logger):
            found = logger
    seen = set(vars(found)) if found is not None else set()  # an attribute of its own hides the class's
    for cls in type(found).__mro__ if found is not None else ():
        for name, value in vars(cls).items():  # read without getattr: no property of the class runs
            if name not in seen and id(value) == function:
                loggers = _graphmend_runtime.__dict__.setdefault("loggers", {})
                loggers[str(owner)] = found  # whose method graphmend::deferred calls
                return name + ":" + str(owner)
            seen.add(name)
    return ""


def _graphmend_logger_method_of(function):
    # The name by which logging.Logger, or a subclass of it, defines the function whose id is
    # ``function``, or "": the method of a logger the op cannot name (one made directly), read
    # while Dynamo traces (a constant of the graph; id() guards on the function).
    todo, seen = [_graphmend_logging.Logger], set()
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        for name, value in vars(cls).items():
            if id(value) == function:
                return name
        todo.extend(cls.__subclasses__())
    return ""


_graphmend_logger_key = _graphmend_logger_method = None
if hasattr(_graphmend_torch.compiler, "assume_constant_result"):
    _graphmend_logger_key = _graphmend_torch.compiler.assume_constant_result(_graphmend_logger_key_of)
    _graphmend_logger_method = _graphmend_torch.compiler.assume_constant_result(_graphmend_logger_method_of)


def _graphmend_shows_exception(callee, kind, target, kwargs):
    # Traced by Dynamo: whether a Logger's call may show the exception being handled
    # (``sys.exc_info()``, read by Logger._log when the call is made).
    if kind not in ("log", "root-log", "call"):
        return False
    if _graphmend_sys.exc_info()[0] is not None:
        # An exception raised and caught in the traced code (an `except` block of the region, or
        # a function called from one; Dynamo knows it while tracing): gone where the op or a
        # replay makes the call. Whatever the call is (another logger's method, whose name the
        # op cannot read; an override; warning_once), it may show it.
        return True
    # The method's name (where the op names the logger, or by the function a Logger class
    # defines); exc_info=True with no exception known while tracing (the region may run under
    # its caller's `except`: the call is made where that is handled).
    if target:
        method = target[1].partition(":")[0]
    elif kind == "log" and target is None and _graphmend_logger_method is not None:
        method = _graphmend_logger_method(id(callee.__func__))  # a bound method (_graphmend_target)
    else:
        method = ""
    shown = kwargs.get("exc_info", method == "exception")
    return kind != "call" and type(shown) in (bool, int) and bool(shown)


def _graphmend_ingraph(where, callee, kind, line, function, op):
    """Under torch.compile: ``callee`` as the ordered effectful op ``op``, made when the graph
    runs (so output made before a later op of the graph fails comes out before the exception,
    as in the original). Its arguments: tensors (shown with their values when the graph runs)
    and constants of the trace (see :func:`_graphmend_encode`). Anything else is recorded for
    the boundary, as is every call after such a record in the region (the order is kept); a
    region that fails after a record loses it, as before, and the rules decline those sites.
    Failures at trace time (a shape that does not fit, an int index out of range) come before any
    op runs: the op's fake kernel saw the call while Dynamo traced it (:func:`_graphmend_traced`),
    and the boundary makes it before the error propagates when its arguments held no tensor (a
    call given a tensor, or a record, ends what it can make: the rules decline those sites)."""

    def ingraph(*args, **kwargs):
        if not _graphmend_torch.compiler.is_compiling():
            # Run eagerly (its code is skipped by Dynamo): a graph break in the call below
            # (:func:`_graphmend_now`) ended the graph at this call. Made now, as written; not
            # traced again as a frame of its own, whose tensor arguments Dynamo would inspect
            # first (a non-leaf's .grad: a UserWarning that the "error" filter raises).
            return _graphmend_now(callee, kind, line, function, where, args, kwargs)
        target = _graphmend_target(callee, kind)
        if target is False or _graphmend_shows_exception(callee, kind, target, kwargs):
            # Something set on the logger object (its code is the program's); the exception
            # being handled (logger.exception, exc_info=True), read when the call is made: where
            # the call runs (the op in the graph, a replay after it) none is. Made as written.
            return _graphmend_now(callee, kind, line, function, where, args, kwargs)
        if _graphmend_shows_grad(args) or _graphmend_shows_grad(kwargs):
            # A tensor whose text shows its autograd (``grad_fn=<MulBackward0>``), which neither
            # the op's copy nor a record's has: the call is made at a graph break, after the
            # calls recorded before it, with the original's location. Dynamo knows requires_grad
            # while it traces: a call without gradients (inference) stays in the graph.
            return _graphmend_now(callee, kind, line, function, where, args, kwargs)
        out = ([], [], [], [], [])
        recorded = getattr(_graphmend_runtime.region, "recorded", False)
        encoded = _graphmend_encode(args, out) and _graphmend_encode(kwargs, out)
        if target is None or recorded or not encoded:
            # A method of a logger the op cannot name, arguments the op cannot carry, or
            # a call after such a record in this region: a record replayed by the boundary, so
            # the output keeps the program's order (and, as before the op, is lost when the
            # graph fails after it).
            return _graphmend_record(where, callee, kind, line, function)(*args, **kwargs)
        op([kind, where.file, str(line), function, *target], *out)

    return ingraph


def _graphmend_skip_ingraph():
    # Dynamo runs the calls of _graphmend_ingraph's closure that a graph break ended eagerly.
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return
    for const in _graphmend_ingraph.__code__.co_consts:
        if getattr(const, "co_name", None) == "ingraph":
            skip_code(const)


_graphmend_skip_ingraph()


def _graphmend_defer(where, callee, kind, line=0, function="", entries=None):
    """``callee`` itself in eager mode; under torch.compile, the call made in the graph by the
    ordered effectful op graphmend::deferred (:func:`_graphmend_ingraph`) or, where this torch
    has no such op, a recorder replayed after the call.
    Under a compiled entry that is not a boundary, or not one of ``entries`` (the module classes
    under which nothing in the graph may fail after the call: of this file, or of another file
    of the package whose code the fix read), ``callee`` itself too: the call runs (and breaks the
    graph) as it did before the rewrite, never recorded for a replay that would not come.
    Without ``entries`` only an entry of this file records (or one the user wrapped by hand,
    which has no name): the fix read no other file, and a record made under another file's entry
    is lost when that entry's graph fails after the call."""
    if not _graphmend_torch.compiler.is_compiling() or not _graphmend_records(where, entries):
        return callee
    op = getattr(_graphmend_runtime, "op", None)
    if op is not None:
        return _graphmend_ingraph(where, callee, kind, line, function, op)
    return _graphmend_record(where, callee, kind, line, function)


def _graphmend_records(where, entries):
    # Whether a record made now is replayed: a boundary started the region, under an entry the
    # fix proved (of ``entries``, or of this file when none are given).
    if not _graphmend_bounded():
        return False
    entry = _graphmend_entry()
    if entries is None:
        return entry is None or entry.rpartition(".")[0] == where.namespace.get("__name__")
    return entry in entries


def _graphmend_record(where, callee, kind, line, function):
    def record(*args, **kwargs):
        entry = (callee, kind, line, function, where, _graphmend_snapshot(args), _graphmend_snapshot(kwargs))
        region = _graphmend_runtime.region  # set up by the boundary that started the region
        region.head = _graphmend_runtime.Record((_graphmend_replay, entry), region.head)
        region.recorded = True

    return record


def _graphmend_replay(callee, kind, line, function, where, args, kwargs):
    args, kwargs = _graphmend_rebuild(args), _graphmend_rebuild(kwargs)
    owner = getattr(callee, "__self__", None)
    if kind == "log" and isinstance(owner, _graphmend_logging.Logger) and getattr(
            callee, "__func__", None) is not getattr(_graphmend_logging.Logger, callee.__name__, None):
        # A Logger subclass that overrides the method: its own code must run (it may filter,
        # redirect or reformat), so call it; the location it reports is then the replay's.
        return callee(*args, **kwargs)
    if kind == "log" and isinstance(owner, _graphmend_logging.Logger):
        return _graphmend_log(callee.__self__, callee.__name__, where.file, line, function, args, kwargs)
    if kind == "root-log":
        if not _graphmend_logging.root.handlers:  # logging.warning() & co. do this first
            _graphmend_logging.basicConfig()
        return _graphmend_log(_graphmend_logging.root, callee.__name__, where.file, line, function, args, kwargs)
    if kind == "warn":
        return _graphmend_warn(where, line, *args, **kwargs)
    return callee(*args, **kwargs)


def _graphmend_log(logger, method, file, line, function, args, kwargs):
    # Logger._log with the call site as the location (findCaller would name the replay).
    if method == "log":
        level, args = args[0], args[1:]
        if not isinstance(level, int):  # as Logger.log
            if _graphmend_logging.raiseExceptions:
                raise TypeError("level must be an integer")
            return
    else:
        level = _graphmend_levels[method]
    if not logger.isEnabledFor(level):
        return
    exc_info = kwargs.get("exc_info", method == "exception")
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif exc_info and not isinstance(exc_info, tuple):
        exc_info = _graphmend_sys.exc_info()
    record = logger.makeRecord(logger.name, level, file, line, args[0], args[1:],
                               exc_info or None, function, kwargs.get("extra"), None)
    logger.handle(record)


def _graphmend_warn(where, line, message, category=None, stacklevel=1, source=None):
    # warnings.warn(stacklevel=1) with the call site as the location; the module's own
    # __warningregistry__ keeps the once-per-location filters shared with eager calls.
    import warnings

    if isinstance(message, Warning):
        category = message.__class__
    module_globals = where.namespace
    warnings.warn_explicit(message, category or UserWarning, where.file, line,
                           module_globals.get("__name__", "<string>"),
                           module_globals.setdefault("__warningregistry__", {}), module_globals, source)


@_graphmend_torch.compiler.disable
def _graphmend_flush():
    """Replay every recorded call, oldest first; Dynamo must not trace the replay itself."""
    region = _graphmend_region()
    node, pending = region.head, []
    region.head, region.recorded = region.root, False
    while node is not None and node is not region.root:
        pending.append(node.replay)
        node = node.previous
    for replay, entry in reversed(pending):
        replay(*entry)


@_graphmend_torch.compiler.disable
def _graphmend_stale():
    """Records left by an earlier compiled call whose entry was not a boundary (this one was
    only inlined there): replaying them now would show them in the wrong call. Drop them and
    say so."""
    region = _graphmend_region()
    count, node = 0, region.head
    while node is not None and node is not region.root:
        count, node = count + 1, node.previous
    region.head, region.recorded = region.root, False
    raise RuntimeError(
        f"graphmend: {count} deferred print/logging/warnings call(s) of an earlier compiled call were "
        "never replayed: that call's compiled entry is not a graphmend boundary (it only inlined one, "
        "e.g. a torch container or a function defined elsewhere). Wrap the compiled callable: "
        "`compiled = <module>._graphmend_boundary(torch.compile(fn))`."
    )


_graphmend_hook_dicts = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


@_graphmend_torch.compiler.disable  # run from an eager boundary's frame: never traced
def _graphmend_hooked(arguments, home=None):
    # Whether code the fix did not read may run inside a compiled call with ``arguments``: a module
    # hook on a module among them (``self`` for a forward) or under it, or a global one
    # (register_module_forward_hook & co.), registered in any file; or, under them, a module of a
    # class, or a callable attribute, defined outside ``home`` (the rewritten file's module) and not
    # torch's own (nor transformers' activations): it may call back into ``home`` after writing
    # state. Dynamo traces all of it into the graph, where a write made before a lowered check is
    # lost when the check fails; so the check keeps its Python form.
    # Run on every call of the outermost boundary: a flat walk of the module dicts (modules() is
    # a generator per level, several times slower on deep trees).
    registry = _graphmend_torch.nn.modules.module
    if any(getattr(registry, "_global" + name, None) for name in _graphmend_hook_dicts):
        return True
    todo, seen = [a for a in arguments if isinstance(a, _graphmend_torch.nn.Module)], set()
    while todo:
        sub = todo.pop()
        if sub is None or id(sub) in seen:
            continue
        seen.add(id(sub))
        state = sub.__dict__
        if any(state.get(name) for name in _graphmend_hook_dicts):
            return True
        children = state.get("_modules", {})
        if home is not None:
            kind = type(sub)
            if not _graphmend_read(kind, home) or any(hasattr(kind, name) for name in children):
                return True  # another file's module, or a child a class attribute shadows
            if any(callable(v) and not isinstance(v, _graphmend_torch.nn.Module) and not _graphmend_read(v, home)
                   for v in state.values()):
                return True
        todo.extend(children.values())
    return False


def _graphmend_read(value, home):
    # Whether a class or callable is the rewritten file's own (``home``), torch's or transformers'
    # activations' (none of them calls back into the file).
    owner = getattr(value, "__module__", None) if isinstance(value, type) else getattr(
        value, "__module__", getattr(type(value), "__module__", None))
    return isinstance(owner, str) and (owner == home or owner == "torch" or owner.startswith(("torch.", "transformers.activations")))


def _graphmend_trap(condition, exc_type, message, raise_when=True, entries=None):
    """``condition`` itself in eager mode; under torch.compile on CPU, an in-graph assertion, but
    only under one of ``entries``: the compiled entries (``module.Class`` or ``module.function``)
    under which the fix proved that nothing in the graph writes state before the check or catches
    its exception. Under any other entry (a class of another file, a subclass, none given) the
    check runs as written, and so it does while a module hook may run in the graph
    (:func:`_graphmend_hooked`)."""
    if not _graphmend_torch.compiler.is_compiling():
        return condition
    if not _graphmend_bounded() or _graphmend_entry() not in (entries or ()) \
            or getattr(_graphmend_runtime.region, "hooked", True) \
            or not (isinstance(condition, _graphmend_torch.Tensor) and condition.numel() == 1
                    and condition.device.type == "cpu"
                    and getattr(_graphmend_builtins, exc_type.__name__, None) is exc_type):
        # Keep the Python check (and its graph break): no boundary to turn the assertion back
        # into the exception, an entry under which the graph may write state first, CUDA (an
        # assert there is a fatal device-side error), an exception that cannot be rebuilt.
        # The Python truth value, not the tensor: Dynamo would lower `assert <tensor>` to an
        # assertion that raises RuntimeError.
        return bool(condition) if isinstance(condition, _graphmend_torch.Tensor) else condition
    ok = _graphmend_torch.logical_not(condition) if raise_when else condition.bool()
    _graphmend_torch._assert_async(ok, _graphmend_trap_prefix + exc_type.__name__ + ":" + message)
    return not raise_when


def _graphmend_equal(a, b):
    """``torch.equal(a, b)`` in eager mode; under torch.compile a 0-d bool tensor (no break)."""
    if not _graphmend_torch.compiler.is_compiling():
        return _graphmend_torch.equal(a, b)
    if a.shape != b.shape:  # static under compile; torch.equal never broadcasts
        return _graphmend_torch.zeros((), dtype=_graphmend_torch.bool, device=a.device)
    return (a == b).all()  # promotes dtypes as torch.equal does; NaN != NaN in both


def _graphmend_restore(error):
    text = str(error)
    if not text.startswith(_graphmend_trap_prefix):
        return None
    name, _, message = text[len(_graphmend_trap_prefix):].partition(":")
    exc_type = getattr(_graphmend_builtins, name, None)
    if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
        return None
    return exc_type(message)


def _graphmend_starts_compiled(function):
    """Whether a boundary running eagerly starts a compiled region by calling ``function``: Dynamo
    skipped the boundary's own frame and traces the next one (its frame callback is set), or
    ``function`` is a ``torch.compile``'d callable. Otherwise the boundary runs eagerly, and a
    compiled callable it reaches later (another file's ``torch.compile(...)``) is an entry of its
    own that no boundary starts. Where torch cannot tell, no boundary starts a region."""
    if getattr(function, "_is_torch_compile", False):
        return True
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
    except ImportError:
        return False
    callback = get_eval_frame_callback()
    return callback is not None and callback is not False  # False: run cached graphs only


def _graphmend_boundary(function, name=None, method=False):
    """Make ``function`` (a forward method or a compiled function) an eager boundary named
    ``name`` (``module.Class`` or ``module.function``: the entry a lowered check or a deferred call
    may be restricted to). For a forward (``method``) the entry is the class the call really runs,
    ``type(self)``; a compiled function is its own entry whatever its arguments are. The entry is
    that of the compiled region the boundary starts: a boundary that runs eagerly (called outside
    torch.compile) starts none, and a compiled callable it calls is no boundary's region."""
    if getattr(function, "__graphmend_boundary__", False):
        return function

    @_graphmend_functools.wraps(function)
    def boundary(*args, **kwargs):
        if _graphmend_torch.compiler.is_compiling():
            # Inlined into an outer compiled region: the outer boundary replays.
            return function(*args, **kwargs)
        region = _graphmend_region()
        depth, bounded, entry = region.depth, region.bounded, region.entry
        if region.head is not region.root:
            if depth:
                _graphmend_flush()  # made earlier in the enclosing boundary's call: they come first
            else:
                _graphmend_stale()
        if not depth:
            region.traced = []  # a trace made outside any boundary's call is none of this call's
        region.depth = depth + 1
        region.bounded = _graphmend_starts_compiled(function)
        # The entry by the class the call really runs (a subclass from another file that
        # inherits this forward is not the class proven here).
        own = args[0] if method and args and isinstance(args[0], _graphmend_torch.nn.Module) else None
        region.entry = name if own is None else type(own).__module__ + "." + type(own).__qualname__
        hooked = getattr(region, "hooked", True)
        if region.bounded:  # a module hook may run in the region it starts: no check is lowered there
            region.hooked = _graphmend_hooked(args, getattr(function, "__module__", None))
        try:
            result = function(*args, **kwargs)
        except BaseException as error:
            region.depth, region.bounded, region.entry, region.hooked = depth, bounded, entry, hooked
            # Graphs that returned before the failure applied their records: show them
            # before the exception propagates, as the original printed before raising.
            if region.head is not region.root:
                _graphmend_flush()
            failed = error
            restored = _graphmend_restore(error) if isinstance(error, RuntimeError) else None
        else:
            region.depth, region.bounded, region.entry, region.hooked = depth, bounded, entry, hooked
            if region.head is not region.root:
                _graphmend_flush()
            if not depth:
                region.traced = []  # traces that built their graph: the graph made the calls
            return result
        # Outside the handler: what a warning filter "error" raises while the calls of a failed
        # trace are made, and a restored exception, are not chained to the compile's error.
        try:
            _graphmend_show_traced(failed)
        finally:
            if not depth:
                region.traced = []
        raise restored if restored is not None else failed

    boundary.__graphmend_boundary__ = True
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return _graphmend_torch.compiler.disable(boundary, recursive=False)
    # torch.compile(module) would start tracing here: run this frame eagerly and compile what
    # it calls; nested in an outer compiled frame it is still inlined (no graph break).
    skip_code(boundary.__code__)
    return boundary


def _graphmend_install_boundaries(namespace):
    # Every module class (and torch.compile'd function) defined here becomes a boundary, so
    # whichever of them is the outermost compiled entry replays what the region recorded.
    name = namespace.get("__name__")
    for key, value in list(namespace.items()):
        if (isinstance(value, type) and issubclass(value, _graphmend_torch.nn.Module)
                and value.__module__ == name and callable(getattr(value, "forward", None))
                and getattr(value, "forward") is not _graphmend_torch.nn.Module.forward):
            # its own forward, or one it inherits (an nn.Sequential subclass): whatever the
            # compiled entry runs must be a boundary, not only what it inlines
            value.forward = _graphmend_boundary(value.forward, value.__module__ + "." + value.__qualname__, True)
        elif (callable(value) and getattr(value, "_is_torch_compile", False)
              and not key.startswith("_graphmend_") and getattr(value, "__module__", None) == name):
            namespace[key] = _graphmend_boundary(value, name + "." + key)
        if (isinstance(value, type) and issubclass(value, _graphmend_torch.nn.Module) and value.__module__ == name
                and "." in name and "__graphmend_adopts__" not in value.__dict__):
            _graphmend_adopt_subclasses(value, name.partition(".")[0])
            value.__graphmend_adopts__ = True


def _graphmend_adopt_subclasses(cls, package):
    # A module class of another file of the package that derives from ``cls`` becomes a boundary
    # when it is defined (a deferred call here may name it in ``entries=``: its file was read by
    # the fix, but never edited). Eagerly the boundary only calls through; inlined in an outer
    # compiled region it is traced like the forward it wraps.
    inherited = cls.__dict__.get("__init_subclass__")

    def adopt(sub, **kwargs):
        if inherited is not None:
            inherited.__get__(None, sub)(**kwargs)
        else:
            super(cls, sub).__init_subclass__(**kwargs)
        forward = getattr(sub, "forward", None)
        if (issubclass(sub, _graphmend_torch.nn.Module) and sub.__module__.partition(".")[0] == package
                and "forward" in sub.__dict__ and callable(forward)):
            sub.forward = _graphmend_boundary(forward, sub.__module__ + "." + sub.__qualname__, True)

    cls.__init_subclass__ = classmethod(adopt)


def _graphmend_install(namespace):
    """Give the rewritten module whose globals are ``namespace`` the names its call sites use
    (``_graphmend_deferred``, ``_graphmend_trap``, ``_graphmend_equal``, ``_graphmend_boundary``)
    and make its module classes and compiled functions boundaries. Called on its last line."""
    where = _GraphmendWhere(_graphmend_sys._getframe(1).f_code.co_filename, namespace)
    if not hasattr(_graphmend_runtime, "wheres"):
        _graphmend_runtime.wheres = {}
    _graphmend_runtime.wheres[where.file] = where  # found by file when graphmend::deferred runs
    _graphmend_ingraph_op()

    def deferred(callee, kind, line=0, function="", entries=None):
        return _graphmend_defer(where, callee, kind, line, function, entries)

    namespace["_graphmend_deferred"] = deferred
    namespace["_graphmend_trap"] = _graphmend_trap
    namespace["_graphmend_equal"] = _graphmend_equal
    namespace["_graphmend_boundary"] = _graphmend_boundary
    _graphmend_install_boundaries(namespace)
