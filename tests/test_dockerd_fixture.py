"""The docker test fixtures themselves: the private daemon answers, the imported base image runs
torch under Dynamo as a non-root user with no network, and a missing dockerd fails loudly."""

from __future__ import annotations

import pytest

from tests.support import dockerd as dockerd_mod


@pytest.mark.docker
def test_base_image_runs_dynamo_as_non_root_without_network(docker_client, docker_base_image):
    script = ("import os, socket, torch; "
              "f = torch.compile(lambda x: x.sin() + 1, backend='eager'); "
              "print(os.getuid(), torch.__version__, round(float(f(torch.zeros(2)).sum()), 3)); "
              "socket.create_connection(('192.0.2.1', 80), timeout=1)")
    container = docker_client.containers.create(docker_base_image, ["python", "-c", script],
                                                user="65534:65534", network_mode="none")
    try:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode().split()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert out == ["65534", "2.13.0+cpu", "2.0"], err
    assert code == 1 and "OSError" in err  # no route out: network_mode none works with this image


@pytest.mark.docker
def test_daemon_is_private_and_shell_tools_exist(dockerd, docker_client, docker_base_image):
    assert dockerd.host.startswith("unix://") and dockerd.socket.exists()
    assert docker_client.info()["Driver"] in ("overlay2", "fuse-overlayfs", "vfs")
    out = docker_client.containers.run(docker_base_image, ["sh", "-c", "id -u && command -v useradd"],
                                       remove=True, network_mode="none")
    assert out.decode().split() == ["0", "/usr/sbin/useradd"]


def test_missing_dockerd_is_a_clear_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(dockerd_mod, "DOCKERD", str(tmp_path / "no-dockerd"))
    with pytest.raises(dockerd_mod.DockerUnavailable, match="dockerd not found .*docker.io") as info:
        dockerd_mod.start_daemon(tmp_path)
    assert info.value.absent


def test_missing_dockerd_skips_with_the_reason_unless_ci_requires_it(tmp_path, monkeypatch):
    monkeypatch.setattr(dockerd_mod, "DOCKERD", str(tmp_path / "no-dockerd"))
    with pytest.raises(dockerd_mod.DockerUnavailable) as info:
        dockerd_mod.start_daemon(tmp_path)
    monkeypatch.delenv(dockerd_mod.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="dockerd not found .*GRAPHMEND_REQUIRE_DOCKER=1"):
        dockerd_mod.skip_or_fail(info.value)
    monkeypatch.setenv(dockerd_mod.REQUIRE_ENV, "1")  # as .ci/run sets it: never pass by skipping
    with pytest.raises(pytest.fail.Exception, match="dockerd not found"):
        dockerd_mod.skip_or_fail(info.value)
    # a daemon that is installed but does not come up is a real failure, required or not
    monkeypatch.delenv(dockerd_mod.REQUIRE_ENV)
    with pytest.raises(pytest.fail.Exception, match="exited with code 1"):
        dockerd_mod.skip_or_fail(dockerd_mod.DockerUnavailable("dockerd exited with code 1 at start"))


@pytest.mark.docker
def test_a_daemon_left_by_a_killed_session_is_reaped(tmp_path):
    # A "session" that starts a daemon and dies without teardown (as under SIGKILL).
    import json
    import os
    import subprocess
    import sys

    script = ("import sys, json; from pathlib import Path; from tests.support import dockerd as d; "
              "daemon = d.start_daemon(Path(sys.argv[1])); "
              "print(json.dumps({'pid': daemon.pid})); sys.stdout.flush(); import os; os._exit(0)")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    root = tmp_path / "session"
    root.mkdir()
    proc = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True,
                          cwd=dockerd_mod.Path(__file__).resolve().parents[1], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pid = json.loads(proc.stdout)["pid"]
    try:
        assert dockerd_mod._alive(pid)  # the orphan holds its slot
        slots = [p.parent for p in dockerd_mod._cache_dir().glob("docker-*/owner.json")
                 if json.loads(p.read_text())["dockerd"] == pid]
        assert len(slots) == 1
        dockerd_mod._reap_orphan(slots[0])
        assert not dockerd_mod._alive(pid)
    finally:
        dockerd_mod.stop_daemon(root)  # by PID, whatever the assertions said
