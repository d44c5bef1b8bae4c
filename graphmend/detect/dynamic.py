"""Dynamic detection: run each target under Dynamo and record every graph break (the ground truth).

Why not use what PyTorch already offers? Under torch 2.13 its channels disagree:
``torch._dynamo.explain()`` counts graphs - 1 and reports -1 when a frame is skipped;
``counters["graph_break"]`` misses data-dependent branches; ``fullgraph=True`` stops at the
first break; the ``graph_breaks`` log is off when ``TORCH_LOGS`` is already set. So the worker
hooks the two places Dynamo itself passes through:

* ``InstructionTranslatorBase.log_graph_break`` — called once for every graph break Dynamo
  decides to compile around (and, since 2.13, also for a break it cannot resume from, just
  before it gives up on the frame), with the ``Unsupported`` exception that carries the
  ``gb_type`` and ``real_stack`` (the user stack, innermost last). It is called whether or not
  the log is enabled.
* ``ConvertFrameAssert.__call__`` — the per-frame compile entry. An exception escaping it
  (a break inside ``try``/``with`` or a loop, the recompile limit, ...) makes Dynamo run the
  whole frame eagerly: a *skipped frame*, which ``explain()`` hides and which costs the most.

``hits`` counts how often Dynamo met a site while compiling: once per layer that runs the
same code, per recompilation, and twice for a break in an inlined call (once in the caller's
trace, once when the callee runs as a frame of its own).

A counting backend counts the graphs Dynamo hands to the compiler. The worker groups
events by stack (the same break in every layer is one site with a hit count); the parent maps
them onto ``GraphBreak`` values with repo-relative locations, categories and fingerprints.

Worker side: ``detect_task`` (imports torch). Parent side: ``detect_targets`` (torch-free).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import linecache
import logging
import os
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from graphmend.config import Config, TargetConfig
from graphmend.detect import classify as cls
from graphmend.model import (
    Category,
    Environment,
    Frame,
    GraphBreak,
    TargetResult,
    fingerprint,
)
from graphmend.runner.channel import clean_text, source_file

# progress(label, done, total): called before each target and once at the end (label "").
Progress = Callable[[str, int, int], None]

_RESUME_RE = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_\d+$")
_GRAPHMEND_DIR = str(Path(__file__).resolve().parents[1])


# ============================================================================================
# Worker side


@dataclass
class _Event:
    kind: str  # "break" | "skip"
    gb_type: str
    message: str
    stack: list[tuple[str, int, str, Optional[int]]]  # (abs file, line, function, col)
    exc: Any = None
    skipped: Optional[tuple[str, str, int]] = None  # (function, file, first line) of a skipped frame


@dataclass
class _Recorder:
    events: list[_Event] = field(default_factory=list)
    traced_files: set[str] = field(default_factory=set)
    graphs: int = 0
    graph_ops: list[int] = field(default_factory=list)
    recompiles: int = 0

    def backend(self, inner: Optional[Callable[..., Any]]) -> Callable[..., Any]:
        """A backend that counts the graphs it receives, then compiles them with ``inner``."""

        def counting_backend(gm: Any, example_inputs: Any) -> Any:
            import torch

            self.graphs += 1
            # A frame compiled again (its guards failed on a later call of it, a layer with other
            # constants, say) has a frame_compile_id above 0: a recompilation.
            compile_id = torch._guards.CompileContext.current_compile_id()
            if compile_id is not None and (compile_id.frame_compile_id or 0) > 0:
                self.recompiles += 1
            self.graph_ops.append(sum(1 for n in gm.graph.nodes if n.op.startswith("call_")))
            return inner(gm, example_inputs) if inner is not None else gm.forward

        return counting_backend

    @contextlib.contextmanager
    def installed(self):  # noqa: ANN201 - a context manager
        from torch._dynamo import convert_frame, symbolic_convert

        tracer_cls = symbolic_convert.InstructionTranslatorBase
        orig_log = tracer_cls.log_graph_break
        orig_init = tracer_cls.__init__
        orig_convert = convert_frame.ConvertFrameAssert.__call__
        recorder = self

        def log_graph_break(tracer: Any, code_options: Any, reason: str, exc: Any) -> None:
            # Dynamo calls this again for an exception it has already logged; count once.
            if not getattr(exc, "logged", False):
                recorder.events.append(_Event("break", _gb_type(exc), _message(exc), _full_stack(_stack_of(exc)), exc=exc))
            return orig_log(tracer, code_options, reason, exc)

        def tracer_init(tracer: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(tracer, *args, **kwargs)
            code = getattr(tracer, "f_code", None)
            if code is not None:
                recorder.traced_files.add(code.co_filename)

        def convert(self_: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return orig_convert(self_, frame, *args, **kwargs)
            except Exception as exc:
                recorder.on_frame_failed(frame.f_code, exc)
                raise

        tracer_cls.log_graph_break = log_graph_break
        tracer_cls.__init__ = tracer_init
        convert_frame.ConvertFrameAssert.__call__ = convert
        try:
            yield self
        finally:
            tracer_cls.log_graph_break = orig_log
            tracer_cls.__init__ = orig_init
            convert_frame.ConvertFrameAssert.__call__ = orig_convert

    def on_frame_failed(self, code: Any, exc: Exception) -> None:
        from torch._dynamo.exc import Unsupported, UserError

        # Only soft failures fall back to eager; anything else propagates to the target's
        # call and becomes the target's error.
        if not isinstance(exc, (Unsupported, UserError)):
            return
        if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            # Dynamo never compiles a generator as a frame of its own ("Attempt to trace
            # generator"): it only gets here when its caller already runs eagerly, so running it
            # eagerly costs no graph. Inside a traced caller it is inlined, not skipped.
            return
        skipped = (code.co_name, code.co_filename, code.co_firstlineno)
        for event in reversed(self.events):
            if event.exc is exc:
                # 2.13 logs a break it cannot resume from, then gives up on the frame:
                # one event, and it is a skipped frame.
                event.kind, event.skipped = "skip", skipped
                return
        stack = _full_stack(_stack_of(exc) or [(code.co_filename, code.co_firstlineno, code.co_name, None)])
        self.events.append(_Event("skip", _gb_type(exc), _message(exc), stack, exc=exc, skipped=skipped))


def _gb_type(exc: Any) -> str:
    return getattr(exc, "gb_type", None) or type(exc).__name__


def _message(exc: Any) -> str:
    return str(getattr(exc, "msg", None) or exc)


def _stack_of(exc: Any) -> list[tuple[str, int, str, Optional[int]]]:
    """The frames Dynamo was tracing at the break (its ``real_stack``), innermost last."""
    stack = getattr(exc, "real_stack", None)
    if not stack:
        import torch

        stack = torch._guards.TracingContext.extract_stack()
    return _collapse((fs.filename, int(fs.lineno or 0), fs.name or "", getattr(fs, "colno", None))
                     for fs in stack or () if fs.filename is not None)


def _collapse(frames: Iterable[tuple[str, int, str, Optional[int]]]) -> list[tuple[str, int, str, Optional[int]]]:
    out: list[tuple[str, int, str, Optional[int]]] = []
    for file, line, name, col in frames:
        name = _RESUME_RE.sub(r"\1", name)
        # Dynamo's resume functions continue the same user frame: collapse them, as its log does.
        if out and out[-1][2] == name and out[-1][0] == file:
            out.pop()
        out.append((file, line, name, col))
    return out


_SKIP_ABOVE = ("runpy.py", "contextlib.py", "threading.py")


def _frames_above() -> list[tuple[str, int, str, Optional[int]]]:
    """The eager callers of the frame Dynamo is compiling (the real stack starts at that frame).

    A layer compiled on its own (its caller ran eagerly after a break or a skipped frame) has
    a real stack of one frame; the model code that called it is on the Python stack instead.
    torch's own frames (Dynamo, ``nn.Module.__call__``) and GraphMend's worker are left out.
    """
    import traceback

    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    frames = []
    for fs in traceback.extract_stack()[:-2]:
        file = fs.filename or ""
        if file.startswith((torch_dir, _GRAPHMEND_DIR + os.sep, "<")) or os.path.basename(file) in _SKIP_ABOVE:
            continue
        frames.append((file, int(fs.lineno or 0), fs.name or "", getattr(fs, "colno", None)))
    return frames


def _full_stack(traced: list[tuple[str, int, str, Optional[int]]]) -> list[tuple[str, int, str, Optional[int]]]:
    return _collapse(_frames_above() + traced)


class _LogCapture(logging.Handler):
    """Collects Dynamo's own ``graph_breaks`` log, for cross-checking the hooks."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.endswith("__graph_breaks"):
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def _dynamo_log(enabled: bool):  # noqa: ANN201
    if not enabled:
        yield None
        return
    import torch

    torch._logging.set_logs(graph_breaks=True)
    handler = _LogCapture()
    # torch's loggers do not propagate to the root logger; listen on the artifact loggers.
    loggers = [logging.getLogger(f"torch._dynamo.{m}.__graph_breaks") for m in ("symbolic_convert", "convert_frame")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        torch._logging.set_logs()


def _registry() -> tuple[dict[str, str], Callable[[str], Optional[str]]]:
    from torch._dynamo import exc as dexc

    return dexc._load_gb_type_to_gb_id_map(), dexc.get_gbid_documentation_link


def detect_task(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Worker task "detect": run one target once under Dynamo and report what happened.

    payload: ``{"target": TargetConfig as a dict, "backend": "eager", "capture_log": false}``.
    Returns ``{"graph_count", "sites": [...], "traced_files": [...], "environment": {...},
    "dynamo_log": [...]}`` with absolute paths; the parent makes them repo-relative.
    """
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from graphmend.targets import compiled_call_error, load_target, with_dynamo_config

    target = payload["target"]
    backend_name = payload.get("backend") or "eager"
    loaded = load_target(target)
    mode = target.get("mode", "eval")

    # A fresh Dynamo: no cached frames, guards or counters from anything before.
    torch._dynamo.reset()
    counters.clear()
    recorder = _Recorder()
    inner = None
    if backend_name != "eager":
        from torch._dynamo.backends.registry import lookup_backend

        inner = lookup_backend(backend_name)
    compiled = with_dynamo_config(torch.compile(loaded.fn, backend=recorder.backend(inner)), target)
    # eval means inference, as the model is served: no autograd. Breaks can differ with grad
    # mode (Dynamo traces some ops differently when they must record a backward), and the mode
    # is recorded with the counts.
    grad = torch.no_grad() if mode == "eval" else contextlib.nullcontext()
    started = time.monotonic()
    with _dynamo_log(bool(payload.get("capture_log"))) as log, recorder.installed(), grad:
        try:
            compiled(*loaded.args, **loaded.kwargs)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            failed = exc
        else:
            failed = None
    if failed is not None:
        # Outside the hooks: the eager check must not be recorded as breaks.
        raise compiled_call_error(target, failed) from failed
    elapsed = time.monotonic() - started

    gb_ids, doc_link = _registry()
    # Paths leave the worker repo-relative when inside the repository: the worker's root (its
    # working directory) need not be the parent's path to the same tree (a container mounts it
    # elsewhere). Paths outside stay absolute, as the worker saw them.
    here = Path.cwd().resolve()

    def rel(path: str) -> str:
        if path.startswith("<"):  # "<string>", "<frozen ...>": no file
            return path
        try:
            return Path(path).resolve().relative_to(here).as_posix()
        except (ValueError, OSError):
            return path

    for event in recorder.events:
        event.stack = [(rel(f), ln, fn, col) for f, ln, fn, col in event.stack]
        if event.skipped:
            event.skipped = (event.skipped[0], rel(event.skipped[1]), event.skipped[2])
    sites: dict[tuple, dict[str, Any]] = {}
    for event in recorder.events:
        key = (event.kind, event.gb_type, tuple((f, ln, fn) for f, ln, fn, _ in event.stack[-1:]),
               event.skipped[0] if event.skipped else None)
        site = sites.get(key)
        if site is None:
            cause = event.message.split("\n", 1)[0].strip()
            sites[key] = {
                "kind": event.kind,
                "gb_type": event.gb_type,
                "gb_id": gb_ids.get(event.gb_type),
                "doc_url": doc_link(event.gb_type),
                "cause_gb_type": cause if cause in gb_ids else None,
                "message": event.message,
                "stack": [list(f) for f in event.stack],
                "skipped_frame": list(event.skipped) if event.skipped else None,
                "hits": 1,
            }
        else:
            site["hits"] += 1
            if len(event.stack) > len(site["stack"]):
                site["stack"] = [list(f) for f in event.stack]
    env = {
        "torch_version": torch.__version__,
        "device": loaded.device,
        "dtype": str(loaded.dtype).replace("torch.", ""),
        "backend": backend_name,
        "mode": mode,
        "python_version": platform.python_version(),
    }
    from graphmend.worker import reads_under

    return {
        "reads": reads_under(here),
        "graph_count": recorder.graphs,
        "graph_ops": recorder.graph_ops,
        "recompiles": recorder.recompiles,
        "sites": list(sites.values()),
        "traced_files": sorted({rel(f) for f in recorder.traced_files}),
        "torch_dir": os.path.dirname(torch.__file__),
        "environment": env,
        "dynamo_log": log.messages if log is not None else [],
        "run_s": elapsed,
    }


# ============================================================================================
# Parent side


# Within ``reusing_runs()``: a target's detection by tree digest and settings (see there).
_RUNS: Optional[dict] = None


@contextlib.contextmanager
def reusing_runs():
    """Within it, a target detected again on a tree that holds the same bytes (``trees.tree_digest``),
    with the same settings and kind of runner, is not run again: the first result (one without an
    error) is returned. For one pipeline in one process (``graphmend demo``: ``check``, then the fix
    loop's first detection on its copy of the same tree, then ``verify``'s graph counts on the
    trees before and after), where the trees are the same bytes a moment later."""
    global _RUNS
    outer = _RUNS
    _RUNS = {} if outer is None else outer
    try:
        yield
    finally:
        _RUNS = outer


def detect_targets(
    config: Config,
    names: Optional[Iterable[str]] = None,
    *,
    root: Optional[Path] = None,
    runner: Any = None,
    progress: Optional[Progress] = None,
    backend: str = "eager",
    capture_log: bool = False,
) -> tuple[TargetResult, ...]:
    """Detect breaks on each target (all, or those named), one worker process per target.

    ``root`` overrides ``config.root`` (the fix loop detects on a rewritten copy of the tree).
    A target that fails in any way becomes a ``TargetResult`` with ``error``; the others run.
    Unknown names raise ``ConfigError`` (a usage error) before anything runs.
    """
    from graphmend.runner import Job, get_runner

    targets = [config.target(n) for n in names] if names else list(config.targets)
    root = Path(root or config.root).resolve()
    runner = runner or get_runner(config)
    results = []
    digest = None
    for i, target in enumerate(targets):
        if progress:
            progress(target.name, i, len(targets))
        payload = {
            "target": _target_dict(target),
            "backend": backend,
            "paths": list(config.paths),
            "exclude": list(config.exclude),
            "capture_log": capture_log,
        }
        key = None
        if _RUNS is not None:
            from graphmend.trees import tree_digest

            digest = digest or tree_digest(root)
            key = (digest, json.dumps(payload, sort_keys=True), config.timeout_for(target), target.device, type(runner))
            if key in _RUNS:
                results.append(_RUNS[key])
                continue
        job = Job(task="detect", payload=payload, root=root, timeout_s=config.timeout_for(target),
                  device=target.device, label=f"target {target.name}")
        outcome = runner.run(job)
        if not outcome.ok:
            results.append(TargetResult(name=target.name, error=outcome.error or "unknown error",
                                        environment=Environment(dtype=target.dtype, backend=backend, mode=target.mode,
                                                                python_version=platform.python_version()),
                                        duration_s=outcome.duration_s))
            continue
        try:
            results.append(result_from_data(target.name, outcome.data or {}, config, root, duration_s=outcome.duration_s))
            if key is not None and not results[-1].error:
                _RUNS[key] = results[-1]
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            # The worker runs the pull request's code: a result of the wrong shape is that target's
            # error, and the other targets still run.
            results.append(TargetResult(name=target.name, error=f"the worker's result is malformed ({type(exc).__name__}: "
                                                                f"{clean_text(str(exc))[:200]})",
                                        environment=Environment(dtype=target.dtype, backend=backend, mode=target.mode,
                                                                python_version=platform.python_version()),
                                        duration_s=outcome.duration_s))
    if progress:
        progress("", len(targets), len(targets))
    return tuple(results)


def _target_dict(target: TargetConfig) -> dict[str, Any]:
    from graphmend.model import to_dict

    return to_dict(target)


def result_from_data(name: str, data: dict[str, Any], config: Config, root: Path, *, duration_s: float = 0.0) -> TargetResult:
    """Turn a detect task's response into a ``TargetResult`` (repo-relative, classified, deduplicated)."""
    root = Path(root).resolve()
    by_site: dict[tuple, GraphBreak] = {}
    for site in data.get("sites", []):
        gb = _graph_break(site, config, root, name, data.get("torch_dir", ""))
        key = (gb.file, gb.line, gb.gb_type, gb.category)
        if key in by_site:
            # Two stacks ending at one site (a helper called from two places) are one finding.
            prev = by_site[key]
            by_site[key] = _replace(prev, hits=prev.hits + gb.hits,
                                    stack=prev.stack if len(prev.stack) >= len(gb.stack) else gb.stack)
        else:
            by_site[key] = gb
    breaks = _with_fingerprints(sorted(by_site.values(), key=lambda b: (b.file, b.line, b.gb_id or "", b.category.value)))
    env = data.get("environment") or {}
    traced = []
    for f in data.get("traced_files", []):
        rel = _relative(f, root)
        if rel is not None:
            traced.append(rel)
    depends_on = _depends_on(data.get("reads"), traced)
    return TargetResult(
        name=name,
        graph_count=int(data.get("graph_count", 0)),
        break_count=len(breaks),
        breaks=tuple(breaks),
        environment=Environment(**{k: str(v) for k, v in env.items() if k in Environment.__dataclass_fields__}),
        skipped_frames=sum(1 for b in breaks if b.category is Category.SKIPPED_FRAME),
        duration_s=duration_s,
        traced_files=tuple(sorted(set(traced))),
        depends_on=depends_on,
        recompiles=max(0, int(data.get("recompiles", 0))),
    )


def _depends_on(reads: Any, traced: list[str]) -> Optional[tuple[str, ...]]:
    """The files the run depended on (what it read, imported and traced), from the worker's
    claim checked at the channel; None when the claim is incomplete or malformed."""
    from graphmend.runner.channel import repo_paths

    if not isinstance(reads, dict) or reads.get("complete") is not True:
        return None
    files = repo_paths(reads.get("files"))
    return None if files is None else tuple(sorted(set(files) | set(traced)))


def _replace(gb: GraphBreak, **changes: Any) -> GraphBreak:
    import dataclasses

    return dataclasses.replace(gb, **changes)


def _relative(path: str, root: Path) -> Optional[str]:
    """The repo-relative form of ``path``, or None when it is outside ``root``.

    A relative path is one the worker already made repo-relative."""
    if path.startswith("<"):
        return None
    try:
        if not os.path.isabs(path):
            # A worker's claim: "../../x" is not in the repository however it is spelled.
            relative = os.path.normpath(path)
            return None if relative.startswith("..") or relative == "." else Path(relative).as_posix()
        resolved = Path(path).resolve()
        return resolved.relative_to(root).as_posix()
    except (ValueError, OSError):
        return None


def _graph_break(site: dict[str, Any], config: Config, root: Path, target: str, torch_dir: str = "") -> GraphBreak:
    frames = []
    for file, line, function, col in site["stack"]:
        rel = _relative(file, root)
        # the path this process may read the file at (for the source line and the statement
        # shape), or "" when the worker's path is not one it may open (source_file says which)
        readable = source_file(rel if rel is not None else file, root) or ""
        frames.append((Frame(file=rel if rel is not None else file, line=int(line), function=function,
                             inside_repo=rel is not None), col, readable))
    skipped = site["kind"] == "skip"
    # The site is the innermost frame of code someone could edit: Dynamo also traces torch's
    # own Python code (nn.Module plumbing, polyfills), which is never the place to fix. A site
    # in another library (site-packages) is reported there, marked outside paths: the line of
    # the repository that called it holds no `if`/`print` to rewrite.
    prefix = torch_dir.rstrip("/\\") + os.sep if torch_dir else None
    editable = [i for i, (f, _, _) in enumerate(frames)
                if f.inside_repo or not (prefix and f.file.startswith(prefix))]
    pick = editable[-1] if editable else len(frames) - 1
    message = site["message"]
    statement = _statement_at(frames[pick][2], frames[pick][0].line) if frames else None
    c = cls.classify(site["gb_type"], message, statement=statement, skipped_frame=skipped,
                     cause_gb_type=site.get("cause_gb_type"))
    if c.category is Category.SIDE_EFFECT and len(editable) > 1 and frames[pick][0].function.endswith("_once"):
        # transformers-style ``logger.warning_once`` is an lru_cache'd helper that calls
        # ``self.warning``; Dynamo breaks inside the helper, but the call to defer is the
        # caller's ``logger.warning_once(...)`` one frame out.
        pick = editable[-2]
    if frames:
        frame, col, abs_file = frames[pick]
    else:  # Dynamo gave no stack at all (rare): report the skipped frame's own location.
        function, file, first = site.get("skipped_frame") or ("<unknown>", "<unknown>", 0)
        rel = _relative(file, root)
        abs_file = source_file(rel if rel is not None else file, root) or ""
        frame, col = Frame(file=rel or file, line=int(first), function=function, inside_repo=rel is not None), None
    source_line = linecache.getline(abs_file, frame.line).rstrip("\n") if frame.line and abs_file else ""
    return GraphBreak(
        file=frame.file,
        line=frame.line,
        col=col,
        reason=_reason(site, root),
        category=c.category,
        source_line=source_line.strip(),
        function=_qualname_at(abs_file, frame.line) or frame.function,
        gb_id=site.get("gb_id"),
        gb_type=site["gb_type"],
        doc_url=site.get("doc_url"),
        fixable=c.fixable,
        rule=c.rule,
        lever=c.lever,
        lever_reason=c.lever_reason,
        hits=int(site.get("hits", 1)),
        verified=True,
        outside_paths=not frame.inside_repo or not config.is_in_paths(frame.file),
        stack=tuple(f for f, _, _ in frames),
        target=target,
    )


_EXPLANATION_RE = re.compile(r"^\s*Explanation:\s*(.*)$", re.M)


def _reason(site: dict[str, Any], root: Path) -> str:
    """One readable line: the break type and Dynamo's explanation (of the first break, for a skip)."""
    message = site["message"]
    explanation = _EXPLANATION_RE.search(message)
    first = message.split("\n", 1)[0].strip()
    text = f"{first}: {explanation.group(1).strip()}" if explanation else first
    if site["kind"] == "skip":
        function, file, line = site.get("skipped_frame") or ("?", "?", 0)
        function = _RESUME_RE.sub(r"\1", function)
        shown = _relative(file, root) or file
        how = f"{site['gb_type']}; " if site["gb_type"] != first else ""
        return f"{_SKIPPED_PREFIX}{function}() ({shown}:{line}) and ran it eagerly: {how}{text}"
    return text


_SKIPPED_PREFIX = "Dynamo skipped the frame "
_SKIPPED_RE = re.compile(r"^" + re.escape(_SKIPPED_PREFIX) + r"(\w+)\(\) \((.+?):(\d+)\) and ran it eagerly")


def skipped_frame(b: GraphBreak) -> Optional[tuple[str, str, int]]:
    """(function, file, first line) of the frame a skipped-frame break made Dynamo run eagerly,
    as ``_reason`` wrote it: for a resume function (the rest of a frame after an earlier break)
    the first line is the line it resumes at; for a whole frame, its ``def`` line."""
    if b.category is not Category.SKIPPED_FRAME:
        return None
    m = _SKIPPED_RE.match(b.reason)
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


def _statement_at(abs_file: str, line: int) -> Optional[str]:
    """The shape of the statement Dynamo broke on: an ``if`` guarding only a ``raise`` is a validation."""
    try:
        tree = _parse(abs_file)
    except (OSError, SyntaxError, ValueError):
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and node.lineno <= line <= _test_end(node):
            if best is None or node.lineno >= best.lineno:
                best = node
    if best is None:
        return None
    if isinstance(best, ast.While):
        return cls.STMT_WHILE
    if isinstance(best, ast.Assert):
        return cls.STMT_ASSERT
    if isinstance(best, ast.IfExp):
        return cls.STMT_IFEXP  # GM402's, not GM101's (which rewrites `if` statements)
    if isinstance(best, ast.If) and len(best.body) == 1 and isinstance(best.body[0], ast.Raise):
        return cls.STMT_IF_RAISE
    return cls.STMT_IF


def _qualname_at(abs_file: str, line: int) -> Optional[str]:
    """``Class.method`` of the function around ``line`` (Dynamo's frames carry only the bare
    name); the same spelling static detection uses, so fingerprints of one site agree."""
    try:
        tree = _parse(abs_file)
    except (OSError, SyntaxError, ValueError):
        return None
    best: Optional[str] = None

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if child.lineno <= line <= (child.end_lineno or child.lineno):
                    if not isinstance(child, ast.ClassDef):
                        best = name
                    visit(child, name + ".")

    visit(tree, "")
    return best


def _test_end(node: ast.AST) -> int:
    test = getattr(node, "test", None)
    return getattr(test, "end_lineno", None) or node.lineno


_PARSED: dict[str, ast.AST] = {}


def _parse(path: str) -> ast.AST:
    if not path:
        raise ValueError("no source file this process may read")
    if path not in _PARSED:
        _PARSED[path] = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    return _PARSED[path]


def _with_fingerprints(breaks: list[GraphBreak]) -> list[GraphBreak]:
    """Fingerprints count repeated identical lines within a function, so two alike sites differ."""
    seen: dict[tuple, int] = {}
    out = []
    for b in breaks:
        kind = b.category.value  # as static detection does, so one site has one fingerprint
        key = (b.file, b.function, kind, " ".join(b.source_line.split()))
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        out.append(_replace(b, fingerprint=fingerprint(b.file, b.function, kind, b.source_line, occurrence)))
    return out


__all__ = ["detect_task", "detect_targets", "result_from_data"]
