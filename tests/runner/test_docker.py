"""The docker runner against a real daemon started by the suite (tests/support/dockerd.py)."""

from __future__ import annotations

import os
import time

import pytest

from graphmend.runner import Job
from graphmend.runner.docker import DockerRunner

pytestmark = pytest.mark.docker


@pytest.fixture
def runner(dockerd, docker_base_image):
    r = DockerRunner(docker_base_image, memory="256m", pids=256, cpus=1, base_url=dockerd.host)
    yield r
    r.client().close()


def selftest(root, **payload) -> Job:
    return Job(task="selftest", payload=payload, root=root, timeout_s=60, label="selftest")


def test_worker_round_trip_sees_source_read_only_no_network_no_secret(runner, tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text("x = 1\n")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_planted_secret_value")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2")
    monkeypatch.setenv("TORCH_LOGS", "")  # allow-listed prefix: it does go through

    echo = runner.run(selftest(src, value=[1, "two"]))
    assert echo.ok, echo.error
    assert echo.data["echo"] == [1, "two"]
    assert echo.data["cwd"] == "/workspace"

    env = runner.run(selftest(src, action="env")).data["env"]
    assert "GITHUB_TOKEN" not in env and "MY_SERVICE_PASSWORD" not in env
    assert not any("ghp_planted_secret_value" in v or "hunter2" in v for v in env.values())
    assert "TORCH_LOGS" in env
    assert env["PATH"] != os.environ["PATH"]  # the image's PATH, not the host's

    write = runner.run(selftest(src, action="write", path="/workspace/model.py"))
    assert write.ok and write.data["written"] is False
    assert "Read-only file system" in write.data["error"]
    assert (src / "model.py").read_text() == "x = 1\n"

    net = runner.run(selftest(src, action="network", host="1.1.1.1", port=53))
    assert net.ok and net.data["connected"] is False
    assert "unreachable" in net.data["error"].lower()


def test_hang_is_killed_at_timeout_and_the_next_job_runs(runner, tmp_path, docker_client):
    started = time.monotonic()
    hung = runner.run(Job(task="selftest", payload={"action": "hang"}, root=tmp_path, timeout_s=4, label="hang"))
    elapsed = time.monotonic() - started
    assert not hung.ok and hung.timed_out
    assert "timed out after 4 s" in hung.error
    assert elapsed < 30
    # Killed and removed: no container of this runner is left behind.
    assert not [c for c in docker_client.containers.list(all=True) if c.labels.get("graphmend.job") == "hang"]
    after = runner.run(selftest(tmp_path, value="still here"))
    assert after.ok and after.data["echo"] == "still here"


def test_memory_overrun_is_reported_and_the_run_goes_on(runner, tmp_path):
    big = runner.run(Job(task="selftest", payload={"action": "allocate", "bytes": 1024 * 1024 * 1024}, root=tmp_path,
                         timeout_s=60, label="allocate"))
    assert not big.ok
    assert "memory" in big.error and "256m" in big.error
    small = runner.run(Job(task="selftest", payload={"action": "allocate", "bytes": 16 * 1024 * 1024}, root=tmp_path,
                           timeout_s=60, label="allocate-small"))
    assert small.ok and small.data["allocated"] == 16 * 1024 * 1024


def test_gpu_request_without_nvidia_runtime_fails_clearly(runner, tmp_path):
    result = runner.run(Job(task="selftest", payload={}, root=tmp_path, timeout_s=60, device="cuda", label="gpu"))
    assert not result.ok
    assert "NVIDIA Container Toolkit" in result.error


def test_missing_image_is_a_clear_error(dockerd, tmp_path):
    r = DockerRunner("graphmend-no-such-image:1", base_url=dockerd.host)
    result = r.run(selftest(tmp_path))
    assert not result.ok and "graphmend-no-such-image:1" in result.error and "not on the docker daemon" in result.error


def test_verify_runs_both_trees_in_containers(runner, make_repo):
    """The same verify protocol through the container runner: request, tensors and JSON via /scratch."""
    from graphmend.config import load_config
    from graphmend.verify import verify
    from tests.verify.repo_files import BRANCH, MODEL, WHERE, files

    root = make_repo(files())
    (root / "pkg/model.py").write_text(MODEL.replace(BRANCH, WHERE))
    runner.memory = "2g"
    report = verify(load_config(root), runner=runner, count_breaks=False)
    (target,) = report.targets
    assert target.error is None and target.ok, target.mismatches
    assert target.cases == 4 and target.failing_cases == 1
    assert target.environment.torch_version.startswith("2.")
