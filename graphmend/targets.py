"""Loading a target inside a worker: ``entry: "pkg.mod:factory"`` -> (callable, args, kwargs).

Runs only in the worker process (it imports user code and torch).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from graphmend.worker import TaskError


@dataclass
class LoadedTarget:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    device: str
    dtype: Any


def resolve_device(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_entry(entry: str, what: str = "entry") -> Callable[..., Any]:
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module may fail in any way
        raise TaskError(f"{what} {entry!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TaskError(f"{what} {entry!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TaskError(f"{what} {entry!r}: {attr!r} is not callable")
    return obj


def call_factory(factory: Callable[..., Any], options: dict[str, Any]) -> Any:
    """Call ``factory`` with those of ``options`` (dtype, device, a batch size) it accepts."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in options.items() if takes_kwargs or k in params}
    return factory(**kwargs)


def load_target(target: dict[str, Any], *, batch_size: int | None = None) -> LoadedTarget:
    """Build a target from its config (a ``TargetConfig`` as a dict)."""
    import torch

    entry = target["entry"]
    factory = resolve_entry(entry)
    device = resolve_device(target.get("device", "auto"))
    dtype = getattr(torch, target.get("dtype", "float32"))
    options: dict[str, Any] = {"dtype": dtype, "device": device}
    if batch_size is not None and target.get("batch_arg"):
        options[target["batch_arg"]] = batch_size
    try:
        built = call_factory(factory, options)
    except TaskError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise TaskError(f"entry {entry!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    fn, args, kwargs = unpack_factory_result(entry, built)
    if isinstance(fn, torch.nn.Module):
        fn.train(target.get("mode", "eval") == "train")
    return LoadedTarget(fn=fn, args=args, kwargs=kwargs, device=device, dtype=dtype)


def unpack_factory_result(entry: str, built: Any) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    shape = "(callable, args) or (callable, args, kwargs)"
    if not isinstance(built, (tuple, list)) or len(built) not in (2, 3):
        raise TaskError(f"entry {entry!r}: the factory returned {type(built).__name__}, expected {shape}")
    fn, args = built[0], built[1]
    kwargs = built[2] if len(built) == 3 else {}
    if not callable(fn):
        raise TaskError(f"entry {entry!r}: the factory's first item is {type(fn).__name__}, not callable; expected {shape}")
    if not isinstance(args, (tuple, list)):
        raise TaskError(f"entry {entry!r}: the factory's args are {type(args).__name__}, expected a tuple or list; expected {shape}")
    if not isinstance(kwargs, dict):
        raise TaskError(f"entry {entry!r}: the factory's kwargs are {type(kwargs).__name__}, expected a dict; expected {shape}")
    return fn, tuple(args), dict(kwargs)


def compiled_call_error(target: dict[str, Any], exc: BaseException) -> TaskError:
    """Why the compiled call of ``target`` raised ``exc``, saying where the failure is.

    A fresh copy of the target runs eagerly (no torch.compile): if the factory fails this time,
    or the eager call raises too, the problem is in the user's code, not in compilation, and the
    message says so rather than blaming torch.compile.
    """
    import contextlib

    import torch

    try:
        loaded = load_target(target)
    except TaskError as again:
        return again
    grad = torch.no_grad() if target.get("mode", "eval") == "eval" else contextlib.nullcontext()
    try:
        with grad:
            loaded.fn(*loaded.args, **loaded.kwargs)
    except Exception as eager:  # noqa: BLE001 - user code may raise anything
        return TaskError(f"the target raised when called, eagerly too (not a torch.compile problem): {_describe(eager)}")
    return TaskError(f"the target raised under torch.compile (it runs eagerly without it): {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def with_dynamo_config(compiled: Callable[..., Any], target: dict[str, Any]) -> Callable[..., Any]:
    """``compiled`` with the target's ``dynamo_config`` settings in force around every call.

    Dynamo reads these settings when it traces (the first call and each recompilation), so a
    patch around ``torch.compile()`` would do nothing; around each call it holds for every trace.
    """
    settings = tuple(target.get("dynamo_config") or ())
    if not settings:
        return compiled
    import torch._dynamo

    def call(*args: Any, **kwargs: Any) -> Any:
        with torch._dynamo.config.patch(**{name: True for name in settings}):
            return compiled(*args, **kwargs)

    return call
