"""A real docker daemon for the tests, and a base image with GraphMend's dependencies.

Fixtures (registered for the whole suite by ``tests/conftest.py``):

``dockerd``            session: a :class:`Daemon` (``host`` = ``unix://.../docker.sock``, ``pid``, ``root``).
``docker_client``      session: a ``docker.DockerClient`` talking to that daemon.
``docker_base_image``  session: the tag of an image made with ``docker import`` that holds Python 3.11
                       (``/usr/local/bin/python``), ``/bin/sh`` + a few coreutils + ``useradd``, and the
                       test venv's site-packages (torch CPU, libcst, PyYAML, ...) **without** GraphMend
                       itself: mount the source and set ``PYTHONPATH``, or ``pip install`` it on top.
``docker_env``         function: sets ``DOCKER_HOST`` in ``os.environ`` for one test (monkeypatch).

Why a private daemon: the tests must not depend on (or disturb) a daemon the machine may run, and no
registry is reachable, so the base image is built from files already on this machine. The daemon
gets its own socket, pidfile and exec-root (under pytest's base temp dir and /tmp/gmd-*), no bridge and no iptables
rules (containers run with ``network_mode="none"`` anyway), and is stopped by its PID. Its
data-root is a cached slot (``~/.cache/graphmend-tests/docker-N``, locked while a daemon uses it) so
the base image is imported once per machine, not per session.

With pytest-xdist the workers share one daemon: the first worker that needs it starts it under a
file lock; the controller process (which outlives every worker) stops it at the end of the session.

When ``dockerd`` is not installed (or the tests do not run as root, which a private daemon needs),
every test that uses these fixtures SKIPS with that reason, so the README's test command passes on a
fresh machine. ``.ci/run`` installs Debian's ``docker.io`` and sets ``GRAPHMEND_REQUIRE_DOCKER=1``:
then a missing daemon FAILS instead, so CI never passes by skipping them. A daemon that is there but
does not start, or a base image that cannot be made, always fails: that is a real problem.

The root filesystem tarball (~1.2 GB, mostly torch) is cached in ``~/.cache/graphmend-tests`` keyed
by the Python build, the installed distributions and this file; a new key rebuilds it (~15 s) and
re-imports the image (~20 s); an unchanged one costs only the daemon start (~1 s).
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
DATA_SLOTS = 4  # concurrent test sessions on one machine, each with its own data-root
IMAGE_REPO = "graphmend-test-base"

# Paths inside the image.
PREFIX = "/usr/local"
PYVER = f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = f"{PREFIX}/lib/{PYVER}/site-packages"

# Tools the Dockerfile and the sandbox runner may call inside the base image (their shared
# libraries are found with ldd and copied along).
TOOLS = ["sh", "dash", "mkdir", "chown", "chmod", "cat", "ls", "rm", "cp", "mv", "env", "id",
         "true", "false", "echo", "test", "sleep", "ln", "useradd", "groupadd"]
TOOL_FILES = ["/etc/login.defs", "/etc/default/useradd"]

# Parts of the host venv the image does not need: headers, C++ test binaries, build tooling,
# and GraphMend's own editable install (the image must get GraphMend from the code under test).
SITE_EXCLUDE_TOP = {"__pycache__"}
SITE_EXCLUDE_PREFIX = ("__editable__", "graphmend", "_pytest", "pytest", "hypothesis", "_hypothesis",
                       "actionlint", "hadolint", "xdist", "pytest_xdist")
SITE_EXCLUDE_SUB = ("torch/include/", "torch/test/", "torch/share/", "caffe2/")
SITE_KEEP_IN_TORCH_BIN = {"torch/bin/", "torch/bin/torch_shm_manager"}  # `import torch` checks for it
STDLIB_EXCLUDE_TOP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                      "lib2to3", "config-3.11-x86_64-linux-gnu"}


@dataclass(frozen=True)
class Daemon:
    host: str          # DOCKER_HOST value, unix://...
    socket: Path
    pid: int
    root: Path         # pidfile and log (socket and exec-root: a short /tmp/gmd-* dir, see _run_dir)
    log: Path


REQUIRE_ENV = "GRAPHMEND_REQUIRE_DOCKER"  # set by .ci/run: a missing dockerd fails, never skips


class DockerUnavailable(RuntimeError):
    """dockerd is missing or did not come up; the message says why and what to install.

    ``absent`` is True when the machine simply has no usable dockerd (not installed, not root):
    the tests skip then, unless ``GRAPHMEND_REQUIRE_DOCKER`` is set."""

    def __init__(self, message: str, *, absent: bool = False):
        super().__init__(message)
        self.absent = absent


# --------------------------------------------------------------------------------------------
# daemon lifecycle


def _shared_dir(config: pytest.Config) -> Path:
    """The directory every xdist worker and the controller agree on (the controller's basetemp)."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if hasattr(config, "workerinput"):
        base = base.parent  # xdist gives each worker basetemp/popen-gwN
    path = base / "dockerd"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not a running daemon.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _ping(socket_path: Path) -> bool:
    import docker

    try:
        client = docker.DockerClient(base_url=f"unix://{socket_path}", timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _tail(path: Path, n: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _session_pid() -> int:
    """The pytest process that owns this session: the xdist controller, or pytest itself."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def _reap_orphan(slot: Path) -> None:
    """Stop the daemon holding ``slot`` if the test session that started it is gone.

    A session killed outright (SIGKILL, a CI timeout) never runs its teardown, and its daemon,
    started in its own process session, lives on holding the slot. The owner file records both
    PIDs, so only a daemon these fixtures started, for a session that no longer exists, is stopped.
    """
    try:
        owner = json.loads((slot / "owner.json").read_text())
        session, daemon = int(owner["session"]), int(owner["dockerd"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if not _alive(session) and _alive(daemon) and Path(f"/proc/{daemon}/exe").resolve().name == "dockerd":
        _stop_pid(daemon)


def _claim_slot() -> tuple[int, Path]:
    """Lock a persistent data-root (``~/.cache/graphmend-tests/docker-N``) no other daemon uses.

    The data-root outlives the session so the ~1 GB base image is imported once, not per run
    (unpacking it takes ~20 s and deleting it ~35 s on a small CI disk). The lock is an flock that
    the dockerd process inherits: it is held exactly as long as that daemon lives, so two
    concurrent sessions never share a data-root, and a slot whose session died is reclaimed
    (``_reap_orphan``). Returns the locked fd and the slot's directory.
    """
    for attempt in range(2):
        for n in range(DATA_SLOTS):
            slot = _cache_dir() / f"docker-{n}"
            slot.mkdir(exist_ok=True)
            fd = os.open(slot / "lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if attempt == 0:
                    _reap_orphan(slot)
                continue
            return fd, slot
    raise DockerUnavailable(f"all {DATA_SLOTS} docker data-root slots in {_cache_dir()} are in use "
                            "by running test daemons")


def start_daemon(root: Path) -> Daemon:
    """Start dockerd for this session (its socket, pidfile, exec-root and log under ``root``), or
    reuse the one another xdist worker of the same session started, and wait for its API."""
    run = _run_dir(root)
    sock, pidfile, log = run / "docker.sock", root / "docker.pid", root / "dockerd.log"
    if pidfile.exists():
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            pid = -1
        if pid > 0 and _alive(pid) and _ping(sock):
            return Daemon(f"unix://{sock}", sock, pid, root, log)
    if not os.path.exists(DOCKERD):
        raise DockerUnavailable(
            f"dockerd not found at {DOCKERD}: install Debian's docker.io (apt-get install docker.io) "
            "to run the docker tests", absent=True)
    if os.geteuid() != 0:
        raise DockerUnavailable("the docker tests start their own dockerd and need root (uid 0)", absent=True)
    lock_fd, slot = _claim_slot()
    data_root = slot / "data"
    cmd = [DOCKERD,
           "--data-root", str(data_root), "--exec-root", str(run / "exec"),
           "--pidfile", str(pidfile), "-H", f"unix://{sock}",
           # No bridge, no iptables: the daemon must not touch the host's network, and the sandbox
           # runs containers with network_mode="none".
           "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
           "--userland-proxy=false"]
    try:
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    pass_fds=(lock_fd,),  # the daemon holds its slot's lock
                                    start_new_session=True)  # a Ctrl-C aimed at pytest is not for it
    finally:
        os.close(lock_fd)
    (slot / "owner.json").write_text(json.dumps({"session": _session_pid(), "dockerd": proc.pid}))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            shutil.rmtree(run, ignore_errors=True)
            raise DockerUnavailable(f"dockerd exited with code {proc.returncode} at start; log tail:\n"
                                    + _tail(log))
        if sock.exists() and _ping(sock):
            _tidy(sock)
            return Daemon(f"unix://{sock}", sock, proc.pid, root, log)
        time.sleep(0.2)
    _stop_pid(proc.pid)
    shutil.rmtree(run, ignore_errors=True)
    raise DockerUnavailable(f"dockerd did not answer within {START_TIMEOUT_S}s; log tail:\n" + _tail(log))


def _tidy(sock: Path) -> None:
    """Drop what an interrupted earlier session may have left in the reused data-root."""
    import docker

    client = docker.DockerClient(base_url=f"unix://{sock}", timeout=120)
    try:
        for c in client.containers.list(all=True):
            c.remove(force=True)
        client.images.prune(filters={"dangling": True})
    finally:
        client.close()


def _stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            # Reap it if it is our child; otherwise just poll.
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        if not _alive(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_dir(root: Path) -> Path:
    """A short directory for the socket and exec-root: unix socket paths are limited to 108 bytes,
    and containerd puts ``exec/containerd/containerd.sock.ttrpc`` under it, which a deep pytest
    temp dir would overflow. Derived from ``root`` so every xdist worker finds the same one."""
    run = Path("/tmp") / f"gmd-{hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:10]}"
    run.mkdir(mode=0o700, exist_ok=True)
    return run


def stop_daemon(root: Path) -> None:
    """Stop the daemon recorded in ``root/docker.pid`` by its PID (its data-root stays cached)."""
    pidfile = root / "docker.pid"
    if pidfile.exists():
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            pid = -1
        if pid > 0:
            _stop_pid(pid)
    shutil.rmtree(_run_dir(root), ignore_errors=True)


# --------------------------------------------------------------------------------------------
# base image: a root filesystem made from this machine's Python and the test venv


def _ldd(paths: list[str]) -> set[str]:
    """Shared libraries (absolute host paths) the given ELF files load, found with ldd."""
    libs: set[str] = set()
    for i in range(0, len(paths), 200):
        out = subprocess.run(["ldd", *paths[i:i + 200]], capture_output=True, text=True).stdout
        for line in out.splitlines():
            line = line.strip()
            if "=>" in line:
                target = line.split("=>", 1)[1].strip().split(" (")[0].strip()
            elif line.startswith("/"):
                target = line.split(" (")[0].strip()
            else:
                continue
            if target.startswith("/") and os.path.exists(target):
                libs.add(target)
    return libs


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


class _RootfsWriter:
    """Writes a tar stream of a root filesystem; host files keep their symlink structure."""

    def __init__(self, tar: tarfile.TarFile):
        self.tar = tar
        self.done: set[str] = set()

    def _dirs(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d in self.done:
                continue
            self.done.add(d)
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            self.tar.addfile(info)

    def add_host(self, host_path: str, image_path: str | None = None) -> None:
        """Add a host file at ``image_path`` (default: the same path), following symlinks the way
        the host has them (``/lib -> usr/lib`` becomes the same symlink in the image)."""
        image_path = image_path or host_path
        if image_path is host_path:
            # Reproduce every symlinked directory on the way, then the file's own link chain.
            parts = host_path.strip("/").split("/")
            cur = ""
            for i, part in enumerate(parts):
                cur = f"{cur}/{part}"
                if os.path.islink(cur):
                    target = os.readlink(cur)
                    self._link(cur, target)
                    resolved = os.path.normpath(os.path.join(os.path.dirname(cur), target))
                    rest = "/".join(parts[i + 1:])
                    self.add_host(resolved + ("/" + rest if rest else ""))
                    return
        self._file(host_path, image_path)

    def _link(self, path: str, target: str) -> None:
        name = path.strip("/")
        if name in self.done:
            return
        self._dirs(path)
        self.done.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
        self.tar.addfile(info)

    def _file(self, host_path: str, image_path: str) -> None:
        name = image_path.strip("/")
        if name in self.done:
            return
        self._dirs(image_path)
        self.done.add(name)
        info = self.tar.gettarinfo(host_path, arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        # World-readable: the image runs GraphMend as a non-root user.
        info.mode |= 0o444 | (0o111 if info.mode & 0o111 or info.isdir() else 0)
        if info.isreg():
            with open(host_path, "rb") as f:
                self.tar.addfile(info, f)
        else:
            self.tar.addfile(info)

    def add_tree(self, host_dir: str, image_dir: str, skip) -> list[str]:
        """Copy a directory tree; returns the host paths of the ELF files copied (for ldd)."""
        elves = []
        for dirpath, dirnames, filenames in os.walk(host_dir):
            rel_dir = os.path.relpath(dirpath, host_dir)
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            dirnames[:] = sorted(d for d in dirnames if not skip(rel_dir + d + "/"))
            for fn in sorted(filenames):
                rel = rel_dir + fn
                if skip(rel):
                    continue
                src = os.path.join(dirpath, fn)
                if os.path.islink(src):
                    self._link(f"{image_dir}/{rel}", os.readlink(src))
                    continue
                self._file(src, f"{image_dir}/{rel}")
                if (".so" in fn or os.access(src, os.X_OK)) and _is_elf(src):
                    elves.append(src)
        return elves

    def add_text(self, image_path: str, text: str, mode: int = 0o644) -> None:
        name = image_path.strip("/")
        self._dirs(image_path)
        self.done.add(name)
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, 0
        self.tar.addfile(info, io.BytesIO(data))

    def add_dir(self, image_path: str, mode: int) -> None:
        name = image_path.strip("/")
        self._dirs(image_path)
        self.done.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
        self.tar.addfile(info)


def _host_site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def _site_trees() -> list[str]:
    """The venv's site-packages, then the site directories its ``.pth`` files add (a git
    worktree's venv takes torch and the rest from the main checkout's venv that way): the image
    gets all of them in one site-packages, the venv's own files first."""
    site = _host_site_packages()
    trees = [site]
    for pth in sorted(Path(site).glob("*.pth")):
        for line in pth.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if line.startswith("/") and os.path.isdir(line) and line not in trees and "site-packages" in line:
                trees.append(os.path.realpath(line))
    return trees


def _rootfs_key() -> str:
    """Changes when the Python build or any installed distribution (name + version) changes."""
    dists = sorted(p for site in _site_trees() for p in os.listdir(site) if p.endswith((".dist-info", ".egg-info")))
    h = hashlib.sha256()
    h.update(sys.version.encode())
    h.update(sys.base_prefix.encode())
    h.update("\n".join(dists).encode())
    # A change to what goes into the image rebuilds it (and nothing else in this file does).
    for part in (TOOLS, TOOL_FILES, SITE_EXCLUDE_TOP, SITE_EXCLUDE_PREFIX, SITE_EXCLUDE_SUB, SITE_KEEP_IN_TORCH_BIN,
                 STDLIB_EXCLUDE_TOP):
        h.update(repr(sorted(part)).encode())
    for fn in (build_rootfs, _RootfsWriter, _site_skip, _stdlib_skip, _ldd, _site_trees):
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()[:12]


def _site_skip(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    if top in SITE_EXCLUDE_TOP and "/" not in rel.rstrip("/"):
        return True
    if top.startswith(SITE_EXCLUDE_PREFIX):
        return True
    if rel.startswith("torch/bin/") and rel not in SITE_KEEP_IN_TORCH_BIN:
        return True
    return rel.startswith(SITE_EXCLUDE_SUB) or rel.endswith((".a", ".pyi"))


def _stdlib_skip(rel: str) -> bool:
    return rel.split("/", 1)[0] in STDLIB_EXCLUDE_TOP


def build_rootfs(dest: Path) -> None:
    """Write the base image's root filesystem as an uncompressed tar at ``dest``."""
    base = sys.base_prefix  # the interpreter the venv was made from (pyenv's 3.11 here)
    exe = os.path.realpath(os.path.join(base, "bin", PYVER))
    tmp = dest.with_suffix(".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        w = _RootfsWriter(tar)
        for d, mode in (("/tmp", 0o1777), ("/root", 0o700), ("/home", 0o755), ("/proc", 0o555),
                        ("/sys", 0o555), ("/dev", 0o755), ("/etc/skel", 0o755), ("/var/tmp", 0o1777)):
            w.add_dir(d, mode)
        w.add_text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        w.add_text("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
        w.add_text("/etc/shadow", "root:*::0:::::\nnobody:*::0:::::\n", 0o640)
        w.add_text("/etc/gshadow", "root:*::\nnogroup:*::\n", 0o640)
        w.add_text("/etc/os-release", "NAME=graphmend-test-base\nID=graphmend-test-base\n")
        for top in ("/bin", "/sbin", "/lib", "/lib64"):
            if os.path.islink(top):  # merged /usr: keep /bin/sh and the ELF interpreter path valid
                w._link(top, os.readlink(top))
        elves = [exe]
        w.add_host(exe, f"{PREFIX}/bin/{PYVER}")
        w._link(f"{PREFIX}/bin/python3", PYVER)
        w._link(f"{PREFIX}/bin/python", PYVER)
        stdlib = os.path.join(base, "lib", PYVER)
        elves += w.add_tree(stdlib, f"{PREFIX}/lib/{PYVER}", _stdlib_skip)
        for lib in sorted(Path(base, "lib").glob("libpython*.so*")):
            # Into the default search path: the interpreter's RUNPATH points at the host prefix.
            w.add_host(str(lib), f"/usr/lib/x86_64-linux-gnu/{lib.name}")
        for site in _site_trees():  # a name already written (the venv's own) is not overwritten
            elves += w.add_tree(site, SITE, _site_skip)
        for tool in TOOLS:
            path = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
            if path:
                elves.append(os.path.realpath(path))
                w.add_host(path)
        for f in TOOL_FILES:
            if os.path.exists(f):
                w.add_host(f)
        for lib in sorted(_ldd(elves)):
            if lib.startswith((base, *_site_trees())):
                continue  # already inside the image under its new prefix
            w.add_host(lib)
    tmp.replace(dest)


def _cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphmend-tests"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cached_rootfs() -> Path:
    """The rootfs tarball for this Python + venv, built once and shared by later sessions."""
    from filelock import FileLock

    cache = _cache_dir()
    key = _rootfs_key()
    dest = cache / f"rootfs-{key}.tar"
    with FileLock(str(cache / "rootfs.lock")):
        if not dest.exists():
            for old in cache.glob("rootfs-*.tar*"):
                old.unlink(missing_ok=True)  # an outdated venv's tarball: ~1 GB we no longer need
            build_rootfs(dest)
    return dest


def import_base_image(client, tag: str) -> str:
    """``docker import`` the cached rootfs as ``tag`` unless the daemon already has it."""
    import docker

    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    for old in client.images.list(name=IMAGE_REPO):
        # An outdated venv's image: the slot's data-root is kept between sessions, so clean it.
        client.images.remove(old.id, force=True)
    tar = cached_rootfs()
    repo, _, version = tag.partition(":")
    changes = [
        f"ENV PATH={PREFIX}/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "ENV MPLCONFIGDIR=/tmp/matplotlib",
        'CMD ["python3"]',
    ]
    client.api.import_image_from_file(str(tar), repository=repo, tag=version, changes=changes)
    client.images.get(tag)  # raises if the import silently failed
    return tag


# --------------------------------------------------------------------------------------------
# pytest wiring


def _daemon_for(config: pytest.Config) -> Daemon:
    from filelock import FileLock

    shared = _shared_dir(config)
    with FileLock(str(shared / "start.lock")):
        return start_daemon(shared)


def skip_or_fail(exc: DockerUnavailable) -> None:
    """Skip the docker tests on a machine without dockerd; fail when CI requires them or when a
    daemon that is there does not work."""
    if exc.absent and not os.environ.get(REQUIRE_ENV):
        pytest.skip(f"docker tests need a local dockerd: {exc} (.ci/run installs it and sets {REQUIRE_ENV}=1)")
    pytest.fail(f"docker tests need a local dockerd: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dockerd(pytestconfig) -> Daemon:
    try:
        return _daemon_for(pytestconfig)
    except DockerUnavailable as exc:
        skip_or_fail(exc)


@pytest.fixture(scope="session")
def docker_client(dockerd):
    import docker

    client = docker.DockerClient(base_url=dockerd.host, timeout=600)
    yield client
    client.close()


@pytest.fixture(scope="session")
def docker_base_image(pytestconfig, dockerd, docker_client) -> str:
    from filelock import FileLock

    tag = f"{IMAGE_REPO}:{_rootfs_key()}"
    try:
        with FileLock(str(_shared_dir(pytestconfig) / "image.lock")):
            return import_base_image(docker_client, tag)
    except Exception as exc:  # the tests must say why, not skip
        pytest.fail(f"could not make the docker base image {tag}: {exc}", pytrace=False)


@pytest.fixture
def docker_env(dockerd, monkeypatch) -> Daemon:
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    return dockerd


def pytest_sessionfinish(session: pytest.Session) -> None:
    # The controller (or the only process without xdist) outlives every worker: it stops the daemon.
    config = session.config
    if hasattr(config, "workerinput"):
        return
    base = getattr(config, "_tmp_path_factory", None)
    if base is None:
        return
    shared = base.getbasetemp() / "dockerd"
    if (shared / "docker.pid").exists():
        stop_daemon(shared)
