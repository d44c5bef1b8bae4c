"""The default runner: a fresh Python interpreter per job, inside a bubblewrap sandbox on Linux.

With ``bwrap`` (Debian/Ubuntu package ``bubblewrap``) the worker gets new user, PID, network,
IPC, UTS and cgroup namespaces (no network at all: not even the host's loopback), a read-only
view of only what Python needs (system directories, the Python installation and its
site-packages, GraphMend's package, the repository tree), a private ``/tmp``, and its scratch
folder as the only writable place. It sees neither ``$HOME`` nor the runner's folders nor any
other process (so no ``/proc/<pid>/environ`` of the parent), and when the job ends the PID
namespace ends with it: nothing it started survives. Memory is limited per process with
``RLIMIT_AS`` (``RLIMIT_DATA`` for CUDA jobs, whose driver reserves address space it never uses).

Without a usable ``bwrap`` the runner still runs jobs, but it then isolates crashes, not hostile
code: the worker has the user's rights over files, the network and other processes. The CLI says
so once; ``graphmend pr`` (the action's analysis of a pull request) refuses to run that way
unless told ``--allow-unsandboxed`` (the action's ``allow-unsandboxed: true``).

Either way the worker's stdout and stderr come back through pipes, capped
(``graphmend.runner.channel``), and ``response.json`` is read through the channel.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from graphmend.runner import Job, JobResult, allowed_env
from graphmend.runner.channel import CappedStream, ChannelError, clean_text, remove_tree
from graphmend.runner.channel import read_response as read_channel_response

GRAPHMEND_PACKAGE = Path(__file__).resolve().parents[1]  # .../graphmend
PACKAGE_PARENT = str(GRAPHMEND_PACKAGE.parent)
GRAPHMEND_MOUNT = "/opt/graphmend"  # where the sandbox sees GraphMend's package (as docker does)
# /etc entries the interpreter and its libraries read; the rest of /etc (shadow, the runner's
# configuration) stays out of the sandbox.
# Of /etc/ssl only the public part: /etc/ssl/private holds the host's TLS keys (readable to a
# runner that runs as root, and the sandbox keeps the caller's uid).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group", "localtime",
             "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "alternatives", "os-release", "hosts")
# Started by root, bwrap keeps every capability inside the sandbox's user namespace unless told
# otherwise, and CAP_SYS_ADMIN there remounts the read-only binds (the tree, GraphMend's own
# package) read-write. The sandbox never needs one.
BWRAP_BASE = ("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
UNSANDBOXED_WARNING = ("graphmend: bubblewrap (bwrap) is not usable here ({why}): the subprocess runner isolates "
                       "crashes, not hostile code; run untrusted code with sandbox.runner: docker")


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
            remove_tree(scratch)


def write_request(scratch: Path, job: Job, root_in_worker: str) -> None:
    request = {"task": job.task, "payload": job.payload, "root": root_in_worker, "label": job.label}
    path = scratch / "request.json"
    path.unlink(missing_ok=True)  # a name a previous worker planted (a symlink) is replaced, not followed
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(request))


def read_response(scratch: Path, job: Job, returncode: Optional[int], stderr_tail: str, started: float) -> JobResult:
    """Turn what a finished worker left in ``scratch`` into a ``JobResult`` (through the channel).

    ``stderr_tail``: the end of the worker's stderr, already bounded (``CappedStream.tail_text``)."""
    duration = time.monotonic() - started
    tail = clean_text(stderr_tail)
    try:
        response = read_channel_response(scratch)
    except ChannelError as exc:
        if not str(exc).endswith("is missing"):
            return JobResult(ok=False, error=f"unusable worker response: {exc}", returncode=returncode, stderr_tail=tail,
                             duration_s=duration)
        last = [line for line in tail.splitlines() if line.strip()]
        detail = f": {last[-1].strip()[:300]}" if last else ""
        return JobResult(ok=False, error=describe_exit(returncode if returncode is not None else -9) + detail,
                         returncode=returncode, stderr_tail=tail, duration_s=duration)
    if response["ok"]:
        return JobResult(ok=True, data=response["data"], returncode=returncode, stderr_tail=tail, duration_s=duration)
    return JobResult(ok=False, error=clean_text(response.get("error") or "the worker reported an unknown error"),
                     data=response.get("data"), returncode=returncode, stderr_tail=tail, duration_s=duration)


def memory_bytes(size: str) -> int:
    """``"16g"`` / ``"512m"`` / ``"1024k"`` / ``"100"`` (bytes), as ``sandbox.memory`` spells it."""
    m = re.fullmatch(r"(\d+)([kmg]?)", size.strip(), re.I)
    if not m:
        raise ValueError(f"not a memory size: {size!r} (use e.g. 16g or 512m)")
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


@functools.lru_cache(maxsize=None)
def bwrap_problem(bwrap: str = "bwrap") -> Optional[str]:
    """None when ``bwrap`` can build the sandbox here; else why not (one line)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    exe = shutil.which(bwrap)
    if not exe:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        proc = subprocess.run([exe, *BWRAP_BASE, "--ro-bind", "/", "/",
                               "--proc", "/proc", "--dev", "/dev", "true"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    if proc.returncode != 0:
        reason = " ".join(proc.stderr.decode("utf-8", "replace").split())[:200]
        return f"bwrap cannot create namespaces here: {reason or 'exit code ' + str(proc.returncode)}"
    return None


@functools.lru_cache(maxsize=None)
def bwrap_sizes_tmpfs(bwrap: str) -> bool:
    """Whether this ``bwrap`` can bound a tmpfs (``--size``, bubblewrap 0.7 and later)."""
    try:
        done = subprocess.run([bwrap, "--help"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--size" in done.stdout + done.stderr


_warned = False


def warn_unsandboxed(why: str) -> None:
    """Say once per process that jobs run without a sandbox."""
    global _warned
    if not _warned:
        _warned = True
        print(UNSANDBOXED_WARNING.format(why=why), file=sys.stderr)


def _python_dirs(python: str) -> list[str]:
    """Directories the interpreter needs, read-only: its prefixes and every site-packages on its path."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    dirs.add(str(Path(python).resolve().parent.parent))
    for entry in sys.path:  # .pth files add site directories (the action reuses the runner's torch this way)
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            dirs.add(entry)
    out = [d for d in sorted(dirs) if os.path.isdir(d)]
    return [d for d in out if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in out)]


def gpu_device_nodes() -> list[str]:
    """The NVIDIA device nodes of this host (none without a GPU)."""
    return sorted(glob.glob("/dev/nvidia*")) + (["/dev/dri"] if os.path.isdir("/dev/dri") else [])


def uses_gpu(job: Job) -> bool:
    return job.device == "cuda" or (job.device == "auto" and bool(glob.glob("/dev/nvidia[0-9]*")))


def bwrap_command(bwrap: str, python: str, root: Path, scratch: Path, gpu: bool = False,
                  tmpfs_bytes: Optional[int] = None) -> list[str]:
    """The ``bwrap`` command line that runs the worker for ``root`` with ``scratch`` as the only writable place.

    ``/tmp`` and ``/dev/shm`` are private tmpfs, memory that ``RLIMIT_AS`` does not count: each
    holds at most ``tmpfs_bytes`` (``sandbox.memory``). The sandbox's own root (and ``/dev``) is
    read-only, so nothing else in memory can be filled. The worker's environment is the one
    ``bwrap`` is started with (already the allow-list)."""
    size = ["--size", str(tmpfs_bytes)] if tmpfs_bytes else []
    cmd = [bwrap, *BWRAP_BASE, "--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            cmd += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for d in _python_dirs(python):
        cmd += ["--ro-bind", d, d]
    if gpu:
        # The driver's device nodes, and /sys (read-only) where CUDA and NVML look the devices up.
        for node in gpu_device_nodes():
            cmd += ["--dev-bind", node, node]
        cmd += ["--ro-bind", "/sys", "/sys"]
    cmd += ["--ro-bind", str(GRAPHMEND_PACKAGE), f"{GRAPHMEND_MOUNT}/graphmend",
            "--ro-bind", str(root), str(root)]
    if (root / ".git").is_dir() and not (root / ".git").is_symlink():
        # The checkout's git folder stays out: .git/config holds the token actions/checkout persists.
        cmd += ["--tmpfs", str(root / ".git"), "--remount-ro", str(root / ".git")]
    cmd += ["--bind", str(scratch), str(scratch),
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", str(root)]
    return cmd + ["--", python, "-m", "graphmend.worker", str(scratch)]


class SubprocessRunner:
    name = "subprocess"

    def __init__(self, python: str | None = None, *, memory: Optional[str] = None, sandbox: str = "auto",
                 bwrap: str = "bwrap"):
        """``sandbox``: ``auto`` (bwrap when usable, else unsandboxed with a warning), ``bwrap`` (required),
        or ``none`` (crash isolation only)."""
        if sandbox not in ("auto", "bwrap", "none"):
            raise ValueError(f"sandbox must be auto, bwrap or none, not {sandbox!r}")
        self.python = python or sys.executable
        self.memory = memory
        self.memory_limit = memory_bytes(memory) if memory else None
        self.sandbox, self.bwrap = sandbox, bwrap

    def unsandboxed_reason(self) -> Optional[str]:
        """None when jobs run inside bwrap; else why they would not."""
        if self.sandbox == "none":
            return "the runner was asked to run without a sandbox"
        return bwrap_problem(self.bwrap)

    def run(self, job: Job) -> JobResult:
        with job_scratch(job) as scratch:
            return self._run(job, scratch)

    def _run(self, job: Job, scratch: Path) -> JobResult:
        root = Path(job.root).resolve()
        scratch = scratch.resolve()
        why_not = self.unsandboxed_reason()
        if why_not and self.sandbox == "bwrap":
            return JobResult(ok=False, error=f"the sandbox is required but {why_not}")
        write_request(scratch, job, str(root))
        env = allowed_env(dict(os.environ))
        env.update(allowed_env(dict(job.env)))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        if why_not:
            warn_unsandboxed(why_not)
            # The repository root first, so the user's packages import as they do in their tests;
            # GraphMend's own package after it.
            env["PYTHONPATH"] = os.pathsep.join([str(root), PACKAGE_PARENT])
            env.setdefault("TMPDIR", str(scratch))
            cmd = [self.python, "-m", "graphmend.worker", str(scratch)]
        else:
            (scratch / "home").mkdir(exist_ok=True)
            env.update({"PYTHONPATH": os.pathsep.join([str(root), GRAPHMEND_MOUNT]), "HOME": str(scratch / "home"),
                        "TMPDIR": "/tmp", "USER": env.get("USER", "graphmend"), "LOGNAME": env.get("LOGNAME", "graphmend")})
            cmd = bwrap_command(shutil.which(self.bwrap) or self.bwrap, self.python, root, scratch, gpu=uses_gpu(job),
                                tmpfs_bytes=self.memory_limit if bwrap_sizes_tmpfs(self.bwrap) else None)
        started = time.monotonic()
        out, err = CappedStream(), CappedStream()
        proc = subprocess.Popen(
            cmd, cwd=str(root), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so the end of the job kills its children too
            preexec_fn=self._limits(job),
        )
        readers = [out.drain_in_thread(proc.stdout), err.drain_in_thread(proc.stderr)]  # type: ignore[arg-type]
        try:
            returncode = proc.wait(timeout=job.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _join(readers)
            return JobResult(ok=False, timed_out=True, error=f"timed out after {job.timeout_s:g} s (the worker was killed)",
                             stderr_tail=clean_text(err.tail_text()), duration_s=time.monotonic() - started)
        # Whatever the worker left running in its process group (bwrap's PID namespace already
        # took its own) ends with the job, and so do the pipes it may still hold open.
        _kill_group(proc)
        _join(readers)
        if not why_not and 128 < returncode < 128 + 65:
            returncode = 128 - returncode  # bwrap exits 128+N when the worker was killed by signal N
        result = read_response(scratch, job, returncode, err.tail_text(), started)
        if not result.ok and returncode < 0 and self.memory and signal.Signals(-returncode).name in ("SIGKILL", "SIGSEGV", "SIGABRT"):
            return JobResult(ok=False, error=f"{result.error} (sandbox.memory is {self.memory} per process)",
                             returncode=returncode, stderr_tail=result.stderr_tail, duration_s=result.duration_s)
        return result

    def _limits(self, job: Job):  # noqa: ANN202 - a preexec_fn
        limit = self.memory_limit
        if not limit:
            return None
        # A CUDA context reserves far more address space than it uses: limit its data instead.
        which = resource.RLIMIT_DATA if uses_gpu(job) else resource.RLIMIT_AS

        def apply() -> None:
            resource.setrlimit(which, (limit, limit))

        return apply


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _join(threads: list) -> None:
    for thread in threads:
        thread.join(timeout=10)
