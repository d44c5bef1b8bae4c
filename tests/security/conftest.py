"""Helpers for the attack tests: a repository holding the hostile module, a loopback listener,
canary files and a canary secret planted in this (the parent's) environment."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.security import hostile

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@dataclass
class Listener:
    port: int
    accepted: list = field(default_factory=list)


@pytest.fixture
def listener():
    """A TCP listener on the host's 127.0.0.1 that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    seen = Listener(server.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except OSError:
                continue
            seen.accepted.append(addr)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join(timeout=5)
    server.close()


@dataclass
class Scene:
    repo: Path
    secret: str
    canaries: dict[Path, str]
    heartbeat: Path

    def unchanged(self) -> bool:
        return all(p.read_text() == text for p, text in self.canaries.items())


def plant(repo: Path, tmp_path: Path, port: int, heartbeat: Path, monkeypatch, daemon_s: float = 4) -> Scene:
    """``repo/tools/hostile.py`` + its plan; canary files in the checkout, a fake $HOME and a host
    folder; a canary secret in the parent's environment under names a runner really sets."""
    (repo / "tools").mkdir(parents=True, exist_ok=True)
    (repo / "tools" / "__init__.py").write_text("")
    shutil.copy(HERE / "hostile.py", repo / "tools" / "hostile.py")
    secret = f"canary-secret-{uuid.uuid4().hex}"
    for name in ("ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "INPUT_GITHUB_TOKEN", "GITHUB_TOKEN"):
        monkeypatch.setenv(name, secret)
    home = tmp_path / "home"
    host = tmp_path / "host"
    home.mkdir(exist_ok=True)
    host.mkdir(exist_ok=True)
    canaries = {repo / "model.py": "x = 1\n", home / ".bashrc": "# canary\n", host / "tool-cache.txt": "canary\n"}
    for path, text in canaries.items():
        path.write_text(text)
    plan = {"secret": secret, "port": port, "write": [str(p) for p in canaries], "heartbeat": str(heartbeat),
            "daemon_s": daemon_s}
    (repo / "tools" / hostile.ATTACK_PLAN).write_text(json.dumps(plan))
    return Scene(repo, secret, canaries, heartbeat)


def drive(*args: str, timeout: int = 180) -> dict:
    """Run ``tests.security.drive`` (the parent, in a fresh process started with this
    environment, canary secret included) and return its JSON report."""
    proc = subprocess.run([sys.executable, "-m", "tests.security.drive", *args], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["parent_stderr"] = proc.stderr
    return report
