"""The action's pr mode against a pull request whose target attacks, the way the runner host
runs it: action.yml's run step (its env evaluated as the runner does) with canary secrets in the
runner's environment, on a real git repository with the hostile code on the head branch."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

import pytest
import yaml

from tests.action.runner import evaluate
from tests.bot.conftest import commit_all, git
from tests.security.conftest import plant

REPO = Path(__file__).resolve().parents[2]

CONFIG = """paths: [src/]
targets:
  - name: t
    entry: tools.targets:make
    backend: eager
sandbox:
  timeout_s: 120
"""
BENIGN = "def make():\n    import torch\n    return torch.nn.Linear(2, 2), (torch.ones(1, 2),)\n"
HOSTILE = "from tools.hostile import hostile_target as make  # noqa: F401\n"


def run_step_env(inputs: dict[str, str], event_name: str, token: str) -> dict[str, str]:
    """The env: of action.yml's run step, evaluated as the runner evaluates it."""
    spec = yaml.safe_load((REPO / "action.yml").read_text())
    ctx = {"github": {"token": token, "event_name": event_name, "action_path": str(REPO)},
           "runner": {"temp": "/tmp", "os": "Linux"}, "steps": {"install": {"outputs": {"python": sys.executable}}}}
    ctx["inputs"] = {name: evaluate(str(inputs.get(name, decl.get("default", ""))), ctx)
                     for name, decl in spec["inputs"].items()}
    step = next(s for s in spec["runs"]["steps"] if s["id"] == "run")
    return {k: evaluate(str(v), ctx) for k, v in step["env"].items()}


@pytest.mark.parametrize("mode,event,gets_token", [
    ("pr", "pull_request", False), ("auto", "pull_request", False), ("auto", "pull_request_target", False),
    ("pr", "push", False), ("post", "workflow_run", True), ("auto", "workflow_run", True), ("scan", "schedule", True),
    ("auto", "schedule", True)])
def test_the_token_reaches_post_and_scan_only(mode, event, gets_token):
    env = run_step_env({"mode": mode}, event, token="ghs_canary")
    assert (env["INPUT_GITHUB_TOKEN"] == "ghs_canary") is gets_token
    if not gets_token:
        assert "ghs_canary" not in json.dumps(env)


@pytest.fixture
def hostile_pr(tmp_path, monkeypatch, listener):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "__init__.py").write_text("")
    review = repo / "review.json"
    scene = plant(repo, tmp_path, listener.port, tmp_path / "host" / "heartbeat", monkeypatch)
    plan = json.loads((repo / "tools" / "attack-plan.json").read_text())
    plan["write"].append(str(review))
    (repo / "tools" / "attack-plan.json").write_text(json.dumps(plan))
    (repo / "graphmend.yml").write_text(CONFIG)
    (repo / "tools" / "targets.py").write_text(BENIGN)
    git(repo, "init", "-q", "-b", "main")
    base = commit_all(repo, "base")
    (repo / "tools" / "targets.py").write_text(HOSTILE)
    head = commit_all(repo, "a pull request")
    # The canary files are tracked: the checkout is the workspace the action runs in.
    event = {"action": "synchronize", "number": 1, "repository": {"full_name": "o/r"},
             "pull_request": {"number": 1, "head": {"sha": head}, "base": {"sha": base}}}
    (tmp_path / "event.json").write_text(json.dumps(event))
    return scene, repo, review, tmp_path


def find_loot(node):
    """What the hostile target reported back, wherever review.json carries its error text."""
    if isinstance(node, str) and "LOOT " in node:
        return json.JSONDecoder().raw_decode(node.split("LOOT ", 1)[1])[0]
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return next((found for child in children if (found := find_loot(child)) is not None), None)


def run_action_pr(tmp_path: Path, repo: Path, inputs: dict[str, str], path: str) -> subprocess.CompletedProcess:
    token = f"ghs_token_canary_{uuid.uuid4().hex}"
    step_env = run_step_env({"mode": "pr", **inputs}, "pull_request", token=token)
    script = next(s for s in yaml.safe_load((REPO / "action.yml").read_text())["runs"]["steps"] if s["id"] == "run")["run"]
    env = {**os.environ, "PATH": path, "GITHUB_WORKSPACE": str(repo), "GITHUB_EVENT_NAME": "pull_request",
           "GITHUB_EVENT_PATH": str(tmp_path / "event.json"), "RUNNER_TEMP": str(tmp_path / "runner-temp"),
           "GITHUB_OUTPUT": str(tmp_path / "output"), **step_env}
    proc = subprocess.run([shutil.which("bash") or "/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=400)
    proc.token = token  # type: ignore[attr-defined]
    return proc


def test_pr_mode_with_the_default_runner_holds(hostile_pr, listener):
    scene, repo, review, tmp_path = hostile_pr
    proc = run_action_pr(tmp_path, repo, {}, os.environ["PATH"])
    text = review.read_text()
    loot = find_loot(json.loads(text))
    assert loot is not None, proc.stdout[-3000:] + proc.stderr[-3000:]  # the attack ran (and reported back)
    assert loot["secrets"] == [] and not loot["connected"] and loot["written"] == []
    for output in (proc.stdout, proc.stderr, text):
        assert scene.secret not in output and proc.token not in output
    assert listener.accepted == [] and scene.unchanged()
    time.sleep(1.0)
    assert review.read_text() == text and not scene.heartbeat.exists()


@pytest.mark.docker
def test_pr_mode_with_the_docker_runner_holds(hostile_pr, listener, dockerd, docker_base_image, docker_client, monkeypatch):
    """The same pull request with ``sandbox: docker`` (the suite's daemon, its base image)."""
    scene, repo, review, tmp_path = hostile_pr
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    earlier = {c.id for c in docker_client.containers.list(all=True)}
    proc = run_action_pr(tmp_path, repo, {"sandbox": "docker", "image": docker_base_image}, os.environ["PATH"])
    text = review.read_text()
    loot = find_loot(json.loads(text))
    assert loot is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert loot["hostname"] != socket.gethostname()  # the attack ran, in a container (its own hostname)
    assert loot["secrets"] == [] and not loot["connected"] and loot["written"] == []
    assert loot["capabilities"] == 0 and loot["remounted"] == []
    for output in (proc.stdout, proc.stderr, text):
        assert scene.secret not in output and proc.token not in output
    assert listener.accepted == [] and scene.unchanged()
    time.sleep(1.0)
    assert review.read_text() == text and not scene.heartbeat.exists()
    assert _containers_gone(docker_client, earlier)


def _containers_gone(docker_client, earlier: set, wait_s: float = 30.0) -> bool:
    """No process of the job's survives in a container. The runner removes each container however
    its job ends, and Docker can list one for a moment while a forced removal completes: wait for
    that; a container still listed then must at least have stopped (it is named in a warning)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [c for c in docker_client.containers.list(all=True, filters={"label": "graphmend.job"}) if c.id not in earlier]
        if not left:
            return True
        if time.monotonic() > deadline:
            running = [(c.short_id, c.labels) for c in left if c.status in ("running", "restarting", "paused")]
            assert running == [], running
            warnings.warn(f"stopped containers not yet removed: {[(c.short_id, c.status, c.labels) for c in left]}")
            return True
        time.sleep(1.0)


def test_pr_mode_refuses_an_unsandboxed_runner_unless_allowed(hostile_pr, listener, tmp_path):
    scene, repo, review, tmp_path = hostile_pr
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for tool in ("git",):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    proc = run_action_pr(tmp_path, repo, {}, str(bin_dir))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "refusing to run the pull request's code without a sandbox" in proc.stdout + proc.stderr
    assert "sandbox.runner: docker" in proc.stdout + proc.stderr
    assert not review.exists() and scene.unchanged() and listener.accepted == []  # nothing of the PR ran

    # Opted in, the PR's code runs as a plain subprocess: it isolates crashes only, and the
    # attack gets through, except for the token, which was never handed to this step at all.
    allowed = run_action_pr(tmp_path, repo, {"allow-unsandboxed": "true"}, str(bin_dir))
    text = review.read_text() if review.exists() else allowed.stdout + allowed.stderr
    assert "LOOT" in text and allowed.token not in text
