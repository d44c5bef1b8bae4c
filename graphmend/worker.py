"""The worker side of a runner: ``python -m graphmend.worker SCRATCH``.

It reads ``SCRATCH/request.json`` (``{"task", "payload", "root"}``), runs the task function
named in ``TASKS`` and writes ``SCRATCH/response.json`` (``{"ok": true, "data": {...}}`` or
``{"ok": false, "error": "..."}``). Task functions take ``(payload, scratch)`` and return a
JSON-ready dict. This module is the only place user code is imported from.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

# task name -> "module:function"; each owning package registers its task here.
TASKS: dict[str, str] = {
    "detect": "graphmend.detect.dynamic:detect_task",
    "verify": "graphmend.verify.worker:verify_task",
    "bench": "graphmend.bench.worker:bench_task",
    "selftest": "graphmend.worker:selftest_task",
}


class TaskError(Exception):
    """An error the task explains itself; reported without a traceback."""


# ---------------------------------------------------------------------------------------------
# What the worker read: the files a pull request must change to change what a target does.

READS_MAX = 50_000  # distinct paths; past it the record is incomplete (and vouches for nothing)
_READS: set[str] = set()
_reads_overflow = False
_hooked = False


def _audit(event: str, args: tuple) -> None:
    global _reads_overflow
    # "open" is raised by open(), io.open_code (every import's source) and os.open, before the
    # file is opened: a path tried and not found is recorded too (adding it changes the run).
    if event != "open" or not args:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif not isinstance(path, str):
        path = getattr(path, "__fspath__", lambda: None)()
        if not isinstance(path, str):
            return  # a file descriptor: opened by name earlier, and recorded then
    if len(_READS) >= READS_MAX:
        _reads_overflow = True
        return
    _READS.add(os.path.abspath(path))


def record_reads() -> None:
    """From now on, record every file this process opens (an audit hook; once per process)."""
    global _hooked
    if not _hooked:
        _hooked = True
        sys.addaudithook(_audit)


LINK_HOPS_MAX = 40  # the kernel's own limit on links followed in one lookup


def _names_of(path: str, links: Optional[dict[str, Optional[str]]] = None) -> set[str]:
    """``path`` (absolute), every symbolic link met on the way to the file it names, and that
    file: a pull request that retargets any of the links changes what opening ``path`` reads,
    so each is a file the reader depended on (``src/a.py -> impl.py`` names both).

    ``links``: what each path looked up so far is (a link's target, or None), shared by the
    lookups of one record: the files read share most of their folders (thousands of torch
    modules in one site-packages), each looked up once instead of once per file."""
    links = {} if links is None else links
    names = {path}
    # Plain strings, not Path objects: a record holds thousands of files, and the folders
    # each is looked up through (a split's empty parts and "." are skipped as Path skips them).
    done, todo, hops = "/", path.split("/"), 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        step = os.path.join(done, part)
        link = _readlink(step, links) if hops < LINK_HOPS_MAX else None
        if link is None:
            done = step
            continue
        hops += 1
        names.add(step)
        todo = link.split("/") + todo
        done = "/" if os.path.isabs(link) else done
    names.add(done)
    return names


def _readlink(path: str, links: dict[str, Optional[str]]) -> Optional[str]:
    """The target of the link ``path``; None when it is not a link, or missing (the rest is then
    looked up as it is spelled)."""
    if path not in links:
        try:
            links[path] = os.readlink(path)
        except OSError:
            links[path] = None
    return links[path]


def reads_under(root: Path) -> dict[str, Any]:
    """``{"files": [...], "complete": bool}``: the files under ``root`` this process opened or
    imported (repo-relative, sorted), outside ``.git``. ``complete`` is False when the record
    was not kept from the start or overflowed: then it vouches for nothing."""
    roots = {Path(root).resolve(), Path(os.path.abspath(root))}
    seen = set(_READS)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            seen.add(os.path.abspath(file))
    out, links = set(), {}
    inside = tuple(str(here).rstrip("/") + "/" for here in roots)
    for path in seen:
        for name in _names_of(path, links):
            if not name.startswith(inside):  # the names are absolute and normalized, as the roots are
                continue
            for here in roots:
                try:
                    rel = Path(name).relative_to(here)
                except ValueError:
                    continue
                if rel.parts and rel.parts[0] != ".git" and "__pycache__" not in rel.parts:
                    out.add(rel.as_posix())
    complete = _hooked and not _reads_overflow and len(out) <= READS_MAX
    return {"files": sorted(out)[:READS_MAX], "complete": complete}


def selftest_task(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """A tiny task for testing runners: echoes, or misbehaves on request."""
    action = payload.get("action", "echo")
    if action == "raise":
        raise TaskError(payload.get("message", "asked to fail"))
    if action == "hang":
        import time

        time.sleep(3600)
    if action == "exit":
        os._exit(int(payload.get("code", 3)))
    if action == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if action == "env":
        return {"env": dict(os.environ)}
    if action == "write":
        target = Path(payload["path"])
        try:
            target.write_text("x")
            return {"written": True}
        except OSError as exc:
            return {"written": False, "error": str(exc)}
    if action == "network":
        import socket

        try:
            socket.create_connection((payload.get("host", "1.1.1.1"), int(payload.get("port", 53))), timeout=3).close()
            return {"connected": True}
        except OSError as exc:
            return {"connected": False, "error": str(exc)}
    if action == "call":
        # Like a target's factory: a function of the repository, imported and run in the worker.
        return {"returned": resolve(payload["entry"])()}
    if action == "print":
        chunk = "x" * 1023 + "\n"
        stream = sys.stderr if payload.get("stream") == "stderr" else sys.stdout
        for _ in range(int(payload["bytes"]) // 1024):
            stream.write(chunk)
        stream.flush()
        return {"printed": True}
    if action == "allocate":
        blob = bytearray(int(payload["bytes"]))
        for i in range(0, len(blob), 4096):
            blob[i] = 1
        return {"allocated": len(blob)}
    return {"echo": payload.get("value"), "cwd": os.getcwd(), "sys_path0": sys.path[0]}


def resolve(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _write_response(scratch: Path, response: dict[str, Any]) -> None:
    tmp = scratch / "response.json.tmp"
    tmp.write_text(json.dumps(response, default=str), encoding="utf-8")
    os.replace(tmp, scratch / "response.json")


def main(argv: list[str]) -> int:
    scratch = Path(argv[0])
    request = json.loads((scratch / "request.json").read_text(encoding="utf-8"))
    root = request.get("root")
    record_reads()  # before any of the repository's code is imported
    if root:
        sys.path.insert(0, root)
        os.chdir(root)
    task = request.get("task")
    try:
        if task not in TASKS:
            raise TaskError(f"unknown task {task!r}")
        data = resolve(TASKS[task])(request.get("payload") or {}, scratch)
        response = {"ok": True, "data": data}
    except TaskError as exc:
        response = {"ok": False, "error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit included
        response = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    _write_response(scratch, response)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: tasks raise
    # graphmend.worker.TaskError, which must be the class main() catches.
    from graphmend.worker import main as _main

    sys.exit(_main(sys.argv[1:]))
