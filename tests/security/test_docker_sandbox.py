"""Attacks from a target's code against the docker runner (the suite's own daemon,
tests/support/dockerd.py): the scratch folder is the only thing the container shares with the
host, so that is where a hostile target lays its traps for the parent."""

from __future__ import annotations

import json
import threading
import time

import pytest

from graphmend.runner import Job
from graphmend.runner.docker import DockerRunner
from tests.security import hostile
from tests.security.conftest import drive, plant

pytestmark = pytest.mark.docker


@pytest.fixture
def runner(dockerd, docker_base_image):
    r = DockerRunner(docker_base_image, memory="512m", pids=256, cpus=1, base_url=dockerd.host)
    yield r
    r.client().close()


def leftover(docker_client) -> list:
    return docker_client.containers.list(all=True, filters={"label": "graphmend.job=attack"})


def plan_traps(repo, **traps) -> None:
    path = repo / "tools" / hostile.ATTACK_PLAN
    path.write_text(json.dumps({**json.loads(path.read_text()), **traps}))


def run_bounded(runner, job, limit_s):
    """The runner's result, or None when it did not return within ``limit_s`` (it hung)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(runner.run(job)), daemon=True)
    thread.start()
    thread.join(timeout=limit_s)
    return out[0] if out else None


def test_symlinks_in_the_scratch_folder_do_not_reach_host_files(runner, tmp_path, monkeypatch, listener, docker_client):
    """stdout.txt/stderr.txt swapped for symlinks to a host file (the parent used to write the
    logs through them), response.json for one to a host secret (the parent used to read it)."""
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    scene = plant(repo, tmp_path, listener.port, scratch / "heartbeat", monkeypatch)
    host_module = tmp_path / "host" / "graphmend_module.py"
    host_module.write_text("ORIGINAL = True\n")
    secret = tmp_path / "host" / "secret.json"
    secret.write_text(json.dumps({"ok": True, "data": {"token": scene.secret}}))
    plan_traps(repo, links={"stdout.txt": str(host_module), "stderr.txt": str(host_module), "response.json": str(secret)})
    result = runner.run(Job(task="selftest", payload={"action": "call", "entry": "tools.hostile:plant_in_scratch"},
                            root=repo, scratch=scratch, timeout_s=60, label="attack"))
    assert host_module.read_text() == "ORIGINAL = True\n"
    assert not result.ok and "response.json is not a regular file" in result.error
    assert scene.secret not in repr(result)
    assert leftover(docker_client) == []


def test_a_fifo_in_the_scratch_folder_is_refused_within_the_timeout(runner, tmp_path, monkeypatch, listener, docker_client):
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    plant(repo, tmp_path, listener.port, scratch / "heartbeat", monkeypatch)
    plan_traps(repo, fifos=["response.json", "stdout.txt", "stderr.txt"])
    started = time.monotonic()
    result = run_bounded(runner, Job(task="selftest", payload={"action": "call", "entry": "tools.hostile:plant_in_scratch"},
                                     root=repo, scratch=scratch, timeout_s=20, label="attack"), limit_s=40)
    assert result is not None, "the parent hung on a FIFO"
    assert time.monotonic() - started < 40
    assert not result.ok and "not a regular file" in result.error
    assert leftover(docker_client) == []


def test_a_hostile_target_in_docker_gets_no_secret_no_network_no_write_and_leaves_no_process(
        dockerd, docker_base_image, tmp_path, monkeypatch, listener, docker_client):
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    scene = plant(repo, tmp_path, listener.port, scratch / "heartbeat", monkeypatch)
    result = drive("call", "docker", str(repo), "tools.hostile:run", "--scratch", str(scratch),
                   "--image", docker_base_image, "--docker-host", dockerd.host)
    assert result["ok"], result["error"]
    loot = result["data"]["returned"]
    assert loot["secrets"] == [] and not loot["connected"] and listener.accepted == []
    assert loot["written"] == [] and scene.unchanged()
    assert scene.secret not in json.dumps(result)
    beats = scene.heartbeat.read_text() if scene.heartbeat.exists() else ""
    time.sleep(1.0)
    assert (scene.heartbeat.read_text() if scene.heartbeat.exists() else "") == beats
    assert leftover(docker_client) == []


def test_a_flood_of_output_from_a_container_does_not_grow_the_parent(dockerd, docker_base_image, docker_client, tmp_path):
    report = drive("print", "docker", str(tmp_path), str(300 << 20), "--image", docker_base_image,
                   "--docker-host", dockerd.host)
    assert report["ok"], report["error"]
    assert report["peak_rss_mb"] < 400, report["peak_rss_mb"]
    assert "bytes before this cut" in report["stderr_tail"] and len(report["stderr_tail"]) < 5000
    # removed, flood or not (by the job's label: the other xdist worker's tests may run containers on this daemon)
    assert leftover(docker_client) == []


def test_the_checkout_s_git_folder_stays_out_of_the_container(runner, tmp_path, docker_client):
    """actions/checkout persists the job's token in .git/config of the tree mounted as the workspace."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic czNjcmV0\n')
    (tmp_path / "peek.py").write_text("import os\n\n\ndef run():\n    return os.listdir('.git')\n")
    result = runner.run(Job(task="selftest", payload={"action": "call", "entry": "peek:run"}, root=tmp_path, timeout_s=60,
                            label="attack"))
    assert result.ok, result.error
    assert result.data["returned"] == [] and "czNjcmV0" not in json.dumps(result.data)
    assert leftover(docker_client) == []
