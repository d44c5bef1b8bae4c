"""GM202 logging-in-compiled-region: ``logging.*`` / ``logger.*`` calls deferred to the boundary.

Handles ``logging.<level>(...)`` (the root logger), and ``<logger>.<level>(...)`` where
``<logger>`` is a module-level name bound to ``logging.getLogger(...)`` or a library's
``get_logger(...)`` (transformers' ``logging.get_logger``); levels are debug, info, warning,
error, exception, critical, fatal and ``log(level, ...)``. ``warning_once`` / ``info_once``
(transformers: an ``lru_cache``'d method) are replayed by calling them, so the once-per-message
cache and the location they log from are the library's own. See ``_deferral.py``.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from graphmend.transforms import _boundary as B
from graphmend.transforms._analysis import dotted
from graphmend.transforms._deferral import DeferredCallRule, imported_names, keyword, positional
from graphmend.transforms.base import SourceFile, iter_nodes

LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "fatal", "log"})
ONCE = frozenset({"warning_once", "info_once"})

_BEFORE = '''import logging

import torch

logger = logging.getLogger(__name__)


class Encoder(torch.nn.Module):
    def forward(self, x, past=None):
        if past is not None:
            logger.warning_once("`past` is deprecated")
        logger.info(
            "encoding %s", x.shape,
        )
        return x + 1
'''

_AFTER = '''import logging

import torch

logger = logging.getLogger(__name__)


class Encoder(torch.nn.Module):
    def forward(self, x, past=None):
        if past is not None:
            _graphmend_deferred(logger.warning_once, "call")("`past` is deprecated")
        _graphmend_deferred(logger.info, "log", 12, "forward")(
            "encoding %s", x.shape,
        )
        return x + 1
''' + B.RUNTIME


class LoggingInCompiledRegion(DeferredCallRule):
    code = "GM202"
    name = "logging-in-compiled-region"
    summary = "logging / logger.* (warning_once too) in a compiled region: record, replay after the compiled call"
    gb_types = ("logging.Logger method not supported for non-export cases", "Attempted to call function marked as skipped")

    docs = {
        "What it does": (
            "Finds `logging.<level>(...)` and `logger.<level>(...)` statements (debug, info, warning, error, "
            "exception, critical, log, and transformers' `warning_once` / `info_once`) in code that runs "
            "under `torch.compile`, and wraps the callee in `_graphmend_deferred(...)`. Eager mode calls the "
            "logger as written. Under compile the call is made in the graph by the ordered op "
            "`graphmend::deferred` when the graph runs, for a logger that `logging.getLogger` returns (the "
            "runtime names it while Dynamo traces, guarding its identity), or else recorded with its arguments "
            "copied and replayed after the compiled call; either way with the original `pathname`, `lineno` "
            "and `funcName` (built with `Logger.makeRecord` and passed to `Logger.handle`, as `Logger._log` "
            "does). `warning_once` and a Logger subclass's override are called, so the once-per-message "
            "cache and the override still apply."
        ),
        "Why it breaks the graph": (
            "Dynamo does not trace `logging.Logger` methods (*logging.Logger method not supported for "
            "non-export cases*, GB0291) nor `lru_cache`d functions such as transformers' "
            "`logger.warning_once`: each such call ends the graph. In transformers 4.52 every t5, bart, "
            "whisper, marian, pegasus and biogpt decoder breaks on a `warning_once` in `forward`."
        ),
        "Example": "```python\n" + _BEFORE + "```",
        "Use instead": (
            "```python\n            _graphmend_deferred(logger.warning_once, \"call\")(\"`past` is deprecated\")\n```\n"
            "(the graphmend runtime is appended to the module), or log outside the compiled model."
        ),
        "Fix safety": (
            "Safe when a boundary is proven and nothing after the call in the compiled region raises on "
            "tensor values: eager logging is identical; under compile the same records (level, message, "
            "arguments as they were at the call, pathname, lineno, funcName, `extra`) reach the handlers "
            "in order, when the graph runs (or, for a record, at the end of the compiled call); "
            "`created`/`relativeCreated` are that time. Unsafe when the region may raise after a recorded "
            "call (records of a call that raises are lost), or may fail while Dynamo traces it after a call "
            "given a tensor or of a logger not shown to come from `logging.getLogger` (lost with the trace). "
            "Without a proven boundary the fix offered is the `is_compiling()` guard (unsafe: nothing is "
            "logged under compile). Declined: the result is used, `stacklevel=`/`stack_info=` (they name "
            "the caller's frame), `logger.exception` inside an `except` block (the active exception is gone "
            "at replay), `*args` calls."
        ),
        "References": (
            "DESIGN.md, *Deferred side effects*; https://docs.python.org/3/library/logging.html#logging.Logger.makeRecord; "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0291.html"
        ),
    }

    VALID = (
        # stacklevel names the caller's frame: only the running stack knows it
        "import logging\nimport torch\nlogger = logging.getLogger(__name__)\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        logger.warning('x', stacklevel=2)\n        return x\n",
        # a name that is not a logger
        "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        self.log.warning('x')\n        return x\n",
        # logger.exception in an except block: the active exception is gone at replay
        "import logging\nimport torch\nlogger = logging.getLogger(__name__)\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        try:\n            x = x + 1\n        except Exception:\n"
        "            logger.exception('failed')\n        return x\n",
    )
    INVALID = ((_BEFORE, _AFTER),)

    def classify(self, call: cst.Call, source: SourceFile) -> Optional[str]:
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return None
        owner, method = func.value.value, func.attr.value
        modules, _ = imported_names(source, "logging")
        if owner in modules and method in LEVELS:
            return "root-log"
        if owner in _logger_names(source):
            if method in LEVELS:
                return "log"
            if method in ONCE:
                return "call"
        return None

    def refuse(self, call: cst.Call, source: SourceFile, kind: str) -> Optional[str]:
        method = call.func.attr.value  # type: ignore[union-attr]
        for name in ("stacklevel", "stack_info"):
            if keyword(call, name) is not None:
                return f"`{name}=` names a frame of the running stack, which a replay after the compiled call cannot see"
        if method == "exception" and B.in_except_handler(source, call):
            return "logger.exception inside an `except` block logs the active exception, which is gone when the call is replayed"
        if method == "log" and len(positional(call)) < 2:
            return "logger.log(...) without a positional level and message"
        if kind != "call" and not positional(call):
            return f"{method}(...) without a positional message"
        return None


def _logger_names(source: SourceFile) -> set[str]:
    """Module-level names bound once to ``...getLogger(...)`` / ``...get_logger(...)``."""
    return set(_logger_bindings(source))


def named_logger(source: SourceFile, call: cst.Call, root: Optional[str] = None) -> bool:
    """Whether ``call`` is a method of a module-level logger that ``logging.getLogger`` returns, so
    the runtime names it (``_graphmend_target``: a logger of ``logging.Logger.manager``) and makes
    the call in the graph: bound once to ``logging.getLogger(...)``, to transformers'
    ``logging.get_logger(...)`` (``transformers.utils.logging``, which returns
    ``logging.getLogger(name)``), or to a function of another file of the repository (under
    ``root``) every return of which is ``logging.getLogger(...)``."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
        return False
    binder = _logger_bindings(source).get(func.value.value)
    if binder is None:
        return False
    if _get_logger(source, binder):
        return True
    return root is not None and _helper_returns_get_logger(source, binder, root)


def _logger_bindings(source: SourceFile) -> dict[str, cst.BaseExpression]:
    """Module-level names bound once to ``...getLogger(...)`` / ``...get_logger(...)``: the callee."""
    found: dict[str, int] = {}
    binders: dict[str, cst.BaseExpression] = {}
    for stmt in source.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                func = small.value.func if isinstance(small.value, cst.Call) else None
                called = func.attr if isinstance(func, cst.Attribute) else func  # getLogger in a.b.getLogger()
                if isinstance(called, cst.Name) and called.value in ("getLogger", "get_logger"):
                    found[name] = found.get(name, 0) + 1
                    binders[name] = func
                else:
                    found[name] = found.get(name, 0) + 2  # rebound to something else
    return {n: binders[n] for n, c in found.items() if c == 1}


def _get_logger(source: SourceFile, func: cst.BaseExpression) -> bool:
    """Whether ``func`` is the standard ``logging.getLogger`` (or transformers' ``get_logger``)."""
    modules, members = imported_names(source, "logging")
    if isinstance(func, cst.Name):
        return members.get(func.value) == "getLogger" or \
            imported_names(source, "transformers.utils.logging")[1].get(func.value) == "get_logger"
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
        return False
    owner, name = func.value.value, func.attr.value
    if name == "getLogger":
        return owner in modules
    return name == "get_logger" and imported_names(source, "transformers.utils")[1].get(owner) == "logging"


def _helper_returns_get_logger(source: SourceFile, func: cst.BaseExpression, root: str) -> bool:
    """Whether ``func`` is a function of a module of the repository (``from pkg.log import
    get_logger``, ``from ..utils import logging`` then ``logging.get_logger``) every return of
    which is ``logging.getLogger(...)``."""
    from graphmend.transforms._deferral_entries import _read, module_file

    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        owner, name, submodule = func.value.value, func.attr.value, True
    elif isinstance(func, cst.Name):
        owner, name, submodule = func.value, func.value, False
    else:
        return False
    found = None
    for stmt in source.module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    shown = alias.asname.name.value if alias.asname else dotted(alias.name)  # type: ignore[union-attr]
                    if shown == owner:
                        module = dotted(small.module) if small.module is not None else ""
                        real = dotted(alias.name)
                        found = (module + "." + real if module else real, len(small.relative)) if submodule \
                            else (module, len(small.relative))
                        name = name if submodule else real
            elif isinstance(small, cst.Import) and submodule:
                for alias in small.names:
                    if (alias.asname.name.value if alias.asname else dotted(alias.name)) == owner:  # type: ignore[union-attr]
                        found = (dotted(alias.name), 0)
    path = module_file(source.path, found[0], root, found[1]) if found else None
    other = _read(root, path, {}) if path else None
    if other is None or isinstance(other, str):
        return False
    defined = [d for d in other.module.body if isinstance(d, cst.FunctionDef) and d.name.value == name]
    if len(defined) != 1 or defined[0].decorators or any(True for _ in iter_nodes(defined[0], (cst.Yield, cst.Lambda))):
        return False
    returns = list(iter_nodes(defined[0].body, (cst.Return,)))
    return bool(returns) and all(isinstance(r.value, cst.Call) and _get_logger(other, r.value.func) for r in returns)
