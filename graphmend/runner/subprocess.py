"""The default runner: a fresh Python interpreter per job, with a timeout and an env allow-list."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from graphmend.runner import Job, JobResult, allowed_env

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def describe_exit(returncode: int) -> str:
    """A person's reading of a worker's exit status."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the worker process was killed by {name}{hint}"
    return f"the worker process exited with code {returncode} before reporting a result"


@contextlib.contextmanager
def job_scratch(job: Job) -> Iterator[Path]:
    """The job's scratch folder: ``job.scratch`` (created if missing), or a private one removed afterwards."""
    own_scratch = job.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="graphmend-job-")) if own_scratch else Path(job.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        yield scratch
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def write_request(scratch: Path, job: Job, root_in_worker: str) -> None:
    request = {"task": job.task, "payload": job.payload, "root": root_in_worker, "label": job.label}
    (scratch / "request.json").write_text(json.dumps(request), encoding="utf-8")


def read_response(scratch: Path, job: Job, returncode: int, stderr: str, started: float) -> JobResult:
    """Turn what a finished worker left in ``scratch`` into a ``JobResult``."""
    duration = time.monotonic() - started
    tail = stderr[-4000:]
    response_file = scratch / "response.json"
    if response_file.is_file():
        try:
            response = json.loads(response_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return JobResult(ok=False, error=f"unreadable worker response: {exc}", returncode=returncode, stderr_tail=tail, duration_s=duration)
        if response.get("ok"):
            return JobResult(ok=True, data=response.get("data") or {}, returncode=returncode, stderr_tail=tail, duration_s=duration)
        return JobResult(ok=False, error=response.get("error") or "the worker reported an unknown error", data=response.get("data"),
                         returncode=returncode, stderr_tail=tail, duration_s=duration)
    last = [line for line in tail.splitlines() if line.strip()]
    detail = f": {last[-1].strip()}" if last else ""
    return JobResult(ok=False, error=describe_exit(returncode) + detail, returncode=returncode, stderr_tail=tail, duration_s=duration)


class SubprocessRunner:
    name = "subprocess"

    def __init__(self, python: str | None = None):
        self.python = python or sys.executable

    def run(self, job: Job) -> JobResult:
        with job_scratch(job) as scratch:
            return self._run(job, scratch)

    def _run(self, job: Job, scratch: Path) -> JobResult:
        root = Path(job.root).resolve()
        write_request(scratch, job, str(root))
        env = allowed_env(dict(os.environ))
        env.update(job.env)
        # The repository root first, so the user's packages import as they do in their tests;
        # GraphMend's own package after it.
        env["PYTHONPATH"] = os.pathsep.join([str(root), PACKAGE_PARENT])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TMPDIR", str(scratch))
        started = time.monotonic()
        with open(scratch / "stdout.txt", "wb") as out, open(scratch / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                [self.python, "-m", "graphmend.worker", str(scratch)],
                cwd=str(root), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,  # its own process group, so a timeout kills its children too
            )
            try:
                returncode = proc.wait(timeout=job.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return JobResult(ok=False, timed_out=True, error=f"timed out after {job.timeout_s:g} s (the worker was killed)",
                                 duration_s=time.monotonic() - started)
        stderr = (scratch / "stderr.txt").read_bytes().decode("utf-8", "replace")
        return read_response(scratch, job, returncode, stderr, started)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
