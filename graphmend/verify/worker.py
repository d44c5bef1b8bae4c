"""The worker side of ``verify``: run one tree's target on every input, eager and compiled.

Runs inside ``python -m graphmend.worker`` (a fresh interpreter or a container), so it is
the one place here that imports user code. Everything it hands back is either JSON
(``response.json``) or tensors in ``SCRATCH/outputs.pt`` that the parent loads with
``weights_only=True``.

One call of ``verify_task`` is one *arm* (the tree before or after a fix):

1. build the target under a fixed seed; the "before" arm saves its ``state_dict`` and its
   inputs, the "after" arm loads both, so the two arms see the same weights and inputs;
2. for each input case (the factory's example inputs, then the config's ``inputs`` list), call
   the target eagerly and through ``torch.compile`` (the target's backend, behind a counting
   wrapper so the graph count comes back too), capturing outputs (flattened), stdout, stderr,
   log records and warnings and the order they were written in, or the exception raised; and,
   also after an exception, the arguments the call wrote in place and the module state it
   changed (``graphmend.verify.observe``). The "before" arm runs each eager call twice from the
   same state and seed (mode ``repeat``): where the two differ, the original is not
   deterministic and the parent judges the rewrite against that spread;
3. with ``grad``, back-propagate the sum of the floating outputs and keep the gradients.

A call that raises may have written state (a buffer, a counter) before raising, and on CUDA
a failed device assertion leaves the whole process unusable; so the parent re-runs every
failing case alone in a throwaway process (``cases=[i]``) and trusts that run's exception.
Here, after an exception, the target is rebuilt (same seed, same weights) before the next
call so that later cases are not contaminated.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from graphmend.targets import call_factory, load_target, resolve_entry, with_dynamo_config
from graphmend.verify.observe import (
    changed_state,
    flatten,
    output_identity,
    portable,
    restore,
    snapshot,
    state_owner,
    state_signature,
    written_inputs,
)
from graphmend.worker import TaskError

STATE_OUT = "state_out.pt"
STATE_IN = "state_in.pt"
INPUTS_OUT = "inputs_out.pt"
INPUTS_IN = "inputs_in.pt"
OUTPUTS = "outputs.pt"


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


# --------------------------------------------------------------------------------------------
# Capturing what a call prints, logs and warns


# After a graph break Dynamo runs the rest of a function as a generated "resume" function,
# and a record logged there carries its name; the user's function is the one it resumes.
_RESUME_RE = re.compile(r"^torch_dynamo_resume_in_(.+)_at_\d+$")


class _RecordCollector:
    """Keeps every log record any logger handles, with its source location.

    It hooks ``Logger.handle`` rather than adding a handler to the root logger: libraries
    often stop propagation at their own root (transformers' logger does), and their records,
    ``warning_once`` included, are exactly the side effects a rewrite must preserve.
    """

    def __init__(self, order: list[str]) -> None:
        self.records: list[dict[str, Any]] = []
        self.order = order
        self._original: Any = None

    def __enter__(self) -> "_RecordCollector":
        self._original = original = logging.Logger.handle
        collector = self

        def handle(logger: logging.Logger, record: logging.LogRecord) -> Any:
            if not logger.disabled:
                collector.emit(record)
            return original(logger, record)

        logging.Logger.handle = handle  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        logging.Logger.handle = self._original  # type: ignore[method-assign]

    def emit(self, record: logging.LogRecord) -> None:
        # torch's own loggers talk about compilation, which differs between eager and compiled
        # runs by design; they are not the user's side effects.
        if record.name == "torch" or record.name.startswith("torch."):
            return
        _note(self.order, "log")
        self.records.append({
            "message": record.getMessage(),
            "level": record.levelname,
            "pathname": repo_relative(record.pathname),
            "lineno": record.lineno,
            "funcName": _RESUME_RE.sub(r"\1", record.funcName or ""),
        })


def repo_relative(path: str) -> str:
    """A path inside the tree being run as a repo-relative path (the worker runs from the
    tree's root: a temp folder, the working tree, or /workspace in a container), else as is."""
    root = os.path.realpath(os.getcwd())
    real = os.path.realpath(path) if path else path
    if real and (real == root or real.startswith(root + os.sep)):
        return os.path.relpath(real, root).replace(os.sep, "/")
    return path


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__)


class _Stream(io.StringIO):
    """A captured text stream that also notes, in ``order``, when it was written."""

    def __init__(self, name: str, order: list[str]):
        super().__init__()
        self.name, self.order = name, order

    def write(self, text: str) -> int:
        if text:
            _note(self.order, self.name)
        return super().write(text)


def _note(order: list[str], kind: str) -> None:
    """Append ``kind`` to the interleaving of the streams (consecutive writes count once)."""
    if not order or order[-1] != kind:
        order.append(kind)


@contextlib.contextmanager
def _capture():
    """stdout and stderr text, log records and warnings produced inside the block, and the
    order in which these streams were written (``order``: e.g. ``["stdout", "log", "stdout"]``)."""
    order: list[str] = []
    out, err = _Stream("stdout", order), _Stream("stderr", order)
    collector = _RecordCollector(order).__enter__()
    torch_dir = _torch_dir()
    captured: dict[str, Any] = {"stdout": "", "stderr": "", "logs": collector.records, "warnings": [], "order": order}
    try:
        # record=True keeps the default filters (and so the once-per-location registry), which
        # is what a deferred ``warnings.warn`` must reproduce.
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            append = warnings._showwarnmsg_impl  # type: ignore[attr-defined]

            def show(message: Any) -> None:
                if not str(message.filename).startswith(torch_dir):
                    _note(order, "warning")
                append(message)

            # catch_warnings restores the original on exit.
            warnings._showwarnmsg_impl = show  # type: ignore[attr-defined]
            yield captured
    finally:
        collector.__exit__()
        sys.stdout.flush()
        captured["stdout"] = out.getvalue()
        captured["stderr"] = err.getvalue()
        captured["warnings"] = [
            {"category": w.category.__name__, "message": str(w.message), "filename": repo_relative(str(w.filename)), "lineno": w.lineno}
            for w in (caught if "caught" in locals() else [])
            # Dynamo's own warnings (recompilation limits, fallbacks) are about compiling.
            if not str(w.filename).startswith(torch_dir)
        ]


# --------------------------------------------------------------------------------------------
# Exceptions


def _exception_info(exc: BaseException) -> dict[str, str]:
    cls = type(exc)
    module = cls.__module__
    name = cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
    return {"type": name, "message": str(exc)}


# --------------------------------------------------------------------------------------------
# The task


class _Arm:
    """The target of one tree, rebuilt on demand under the same seed and weights."""

    def __init__(self, payload: dict[str, Any], scratch: Path):
        self.payload = payload
        self.scratch = scratch
        self.target = payload["target"]
        self.seed = int(payload.get("seed", 0))
        self.state_note: dict[str, Any] = {"missing": [], "unexpected": [], "shape_mismatch": []}
        self.graph_count = 0
        self.recompiles = 0
        self.build()

    def build(self) -> None:
        import torch

        _seed_everything(self.seed)
        self.loaded = load_target(self.target)
        fn = self.loaded.fn
        if isinstance(fn, torch.nn.Module):
            if self.payload.get("save_state"):
                torch.save({k: v.detach().cpu() for k, v in fn.state_dict().items()}, self.scratch / STATE_OUT)
            state_in = self.scratch / STATE_IN
            if self.payload.get("load_state") and state_in.is_file():
                self._load_state(fn, torch.load(state_in, weights_only=True, map_location=self.loaded.device))
        self.compiled = None

    def _load_state(self, module: Any, state: dict[str, Any]) -> None:
        """Copy the matching weights of the other tree; a mismatch is reported, not hidden."""
        own = module.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        shapes = sorted(k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
        usable = {k: v for k, v in state.items() if k in own and k not in shapes}
        module.load_state_dict(usable, strict=False)
        self.state_note = {"missing": missing, "unexpected": unexpected, "shape_mismatch": shapes}

    def compiled_fn(self) -> Any:
        import torch

        if self.compiled is None:
            from torch._dynamo import lookup_backend

            backend = lookup_backend(self.target.get("backend", "inductor"))

            def counting_backend(gm: Any, example_inputs: Any) -> Any:
                # One call per graph Dynamo hands over: the graph count, next to the break
                # count that detection reports. A frame compiled again (its guards failed on
                # a later input) has a frame_compile_id above 0: a recompilation, which a
                # rewrite that turns a Python value into a tensor (or back) can cause.
                self.graph_count += 1
                compile_id = torch._guards.CompileContext.current_compile_id()
                if compile_id is not None and (compile_id.frame_compile_id or 0) > 0:
                    self.recompiles += 1
                return backend(gm, example_inputs)

            self.compiled = with_dynamo_config(torch.compile(self.loaded.fn, backend=counting_backend), self.target)
        return self.compiled


def _cases(arm: _Arm, scratch: Path, payload: dict[str, Any]) -> list[tuple[str, tuple, dict]]:
    """The input cases: the factory's example inputs, then the config's ``inputs`` function."""
    import torch

    inputs_in = scratch / INPUTS_IN
    if inputs_in.is_file():
        # Written by the other arm's worker (user code on both sides; the parent never loads it).
        return [(s, tuple(a), dict(k)) for s, a, k in torch.load(inputs_in, weights_only=False)]
    cases: list[tuple[str, tuple, dict]] = [("example", arm.loaded.args, arm.loaded.kwargs)]
    spec = arm.target.get("inputs")
    if spec:
        fn = resolve_entry(spec, "inputs")
        try:
            extra = call_factory(fn, {"dtype": arm.loaded.dtype, "device": arm.loaded.device})
        except Exception as exc:  # noqa: BLE001
            raise TaskError(f"inputs {spec!r}: the function raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(extra, (list, tuple)):
            raise TaskError(f"inputs {spec!r}: returned {type(extra).__name__}, expected a list of (args, kwargs)")
        for i, item in enumerate(extra):
            if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (list, tuple)) and isinstance(item[1], dict)):
                raise TaskError(f"inputs {spec!r}: item {i} is not an (args, kwargs) pair")
            cases.append((f"inputs[{i}]", tuple(item[0]), dict(item[1])))
    if payload.get("save_inputs"):
        try:
            torch.save(cases, scratch / INPUTS_OUT)
        except Exception:  # noqa: BLE001 - unpicklable inputs: the other arm rebuilds them under the seed
            pass
    return cases


def _clone_inputs(args: tuple, kwargs: dict, grad: bool) -> tuple[tuple, dict, list[tuple[str, Any]]]:
    """Fresh copies for each call (a target may write into its inputs); leaves for gradients."""
    import torch

    leaves: list[tuple[str, Any]] = []

    def copy(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach().clone()
            if grad and t.is_floating_point():
                t.requires_grad_(True)
                leaves.append((path, t))
            return t
        if isinstance(value, tuple):
            return tuple(copy(v, f"{path}[{i}]") for i, v in enumerate(value))
        if isinstance(value, list):
            return [copy(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: copy(v, f"{path}[{k!r}]") for k, v in value.items()}
        return value

    new_args = tuple(copy(a, f"args[{i}]") for i, a in enumerate(args))
    new_kwargs = {k: copy(v, f"kwargs[{k!r}]") for k, v in kwargs.items()}
    return new_args, new_kwargs, leaves


def _call(arm: _Arm, mode: str, index: int, args: tuple, kwargs: dict, grad: bool, tensors: dict[str, Any]) -> dict[str, Any]:
    import torch

    fn = arm.compiled_fn() if mode == "compiled" else arm.loaded.fn
    call_args, call_kwargs, leaves = _clone_inputs(args, kwargs, grad)
    if grad and isinstance(arm.loaded.fn, torch.nn.Module):
        arm.loaded.fn.zero_grad(set_to_none=True)
    # The same generator state for every call of this case in both arms: dropout in train
    # mode then draws the same numbers.
    _seed_everything(arm.seed + 1000 + index)
    result: dict[str, Any] = {"ok": True, "exception": None, "values": {}, "tensors": []}
    owner = state_owner(arm.loaded.fn)
    state_before = state_signature(owner) if owner is not None else {}
    started = time.perf_counter()
    with _capture() as captured:
        try:
            output = fn(*call_args, **call_kwargs)
            if grad:
                floats = [t for _, t in flatten(output) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
                if floats:
                    sum(t.float().sum() for t in floats).backward()
        except Exception as exc:  # noqa: BLE001 - the user's exception is the result
            result["ok"] = False
            result["exception"] = _exception_info(exc)
            output = None
    if arm.loaded.device == "cuda" and result["ok"]:
        torch.cuda.synchronize()
    result["duration_s"] = time.perf_counter() - started
    result.update(stdout=captured["stdout"], stderr=captured["stderr"], logs=captured["logs"], warnings=captured["warnings"],
                  order=captured["order"])

    def keep(kind: str) -> Any:
        def store(path: str, value: Any) -> None:
            tensors[f"{index}/{mode}/{kind}:{path}"] = portable(value)
        return store

    # What the call wrote besides its outputs, also when it raised: the arguments it was given
    # and the module's state.
    result["inputs"] = written_inputs((args, kwargs), (call_args, call_kwargs), keep("input"))
    result["state"] = changed_state(owner, state_before, keep("state")) if owner is not None else {}
    if result["ok"]:
        for path, leaf in flatten(output):
            if isinstance(leaf, torch.Tensor):
                key = f"{index}/{mode}/{path}"
                tensors[key] = portable(leaf)
                result["tensors"].append(path)
            else:
                result["values"][path] = leaf
        # Whether an output is the caller's own tensor (or a parameter, or a view of one): a
        # fresh copy of equal values is another program, with or without gradients.
        result["values"].update(output_identity(output, (call_args, call_kwargs), owner))
        if grad:
            grads: list[tuple[str, Any]] = []
            if isinstance(arm.loaded.fn, torch.nn.Module):
                grads += [(f"grad:{n}", p.grad) for n, p in arm.loaded.fn.named_parameters() if p.grad is not None]
            grads += [(f"grad:{p}", t.grad) for p, t in leaves if t.grad is not None]
            for path, g in grads:
                tensors[f"{index}/{mode}/{path}"] = portable(g)
                result["tensors"].append(path)
    return result


def verify_task(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Run one arm; see the module docstring. ``payload``:

    ``target`` (a TargetConfig as a dict), ``seed``, ``grad``, ``modes`` (``["eager",
    "compiled"]``), ``cases`` (indices to run, or null for all), ``save_state`` /
    ``load_state`` / ``save_inputs`` (exchange with the other arm through the scratch folder),
    ``stop_on_error`` (CUDA: an exception may have poisoned the process), ``repeat`` (run the
    eager call of each case twice from the same state and seed, as mode ``repeat``: the
    original's own nondeterminism).
    """
    import torch

    torch._dynamo.reset()
    torch.set_num_threads(max(1, int(payload.get("threads", 1))))
    arm = _Arm(payload, scratch)
    cases = _cases(arm, scratch, payload)
    wanted = payload.get("cases")
    modes = payload.get("modes") or ["eager", "compiled"]
    grad = bool(payload.get("grad"))
    tensors: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    stopped_at = None
    for index, (source, args, kwargs) in enumerate(cases):
        if wanted is not None and index not in wanted:
            continue
        entry: dict[str, Any] = {"index": index, "source": source, "modes": {}}
        results.append(entry)
        for mode in modes:
            repeat = mode == "eager" and payload.get("repeat") and state_owner(arm.loaded.fn) is not None
            saved = snapshot(state_owner(arm.loaded.fn)) if repeat else None
            entry["modes"][mode] = outcome = _call(arm, mode, index, args, kwargs, grad, tensors)
            if repeat and saved is not None:
                # The same call again from the same state and seed: where it differs, the
                # original itself is not deterministic, and a rewrite is judged against that.
                owner = state_owner(arm.loaded.fn)
                after_first = snapshot(owner)
                restore(owner, saved)
                entry["modes"]["repeat"] = _call(arm, "repeat", index, args, kwargs, grad, tensors)
                restore(owner, after_first)
            elif mode == "eager" and payload.get("repeat"):
                entry["modes"]["repeat"] = _call(arm, "repeat", index, args, kwargs, grad, tensors)
            if not outcome["ok"]:
                if payload.get("stop_on_error"):
                    stopped_at = index
                    break
                # What the failing call may have written must not leak into the next call.
                arm.build()
        if stopped_at is not None:
            break
    torch.save(tensors, scratch / OUTPUTS)
    from graphmend.worker import reads_under

    return {
        # the repository files this arm read: a change to none of them cannot change what it does
        "reads": reads_under(Path.cwd().resolve()),
        "cases": results,
        "case_count": len(cases),
        "stopped_at": stopped_at,
        "graph_count": arm.graph_count,
        "recompiles": arm.recompiles,
        "state": arm.state_note,
        "environment": {
            "torch_version": torch.__version__,
            "device": arm.loaded.device,
            "dtype": str(arm.loaded.dtype).replace("torch.", ""),
            "backend": arm.target.get("backend", "inductor"),
            "mode": arm.target.get("mode", "eval"),
            "python_version": sys.version.split()[0],
        },
    }
