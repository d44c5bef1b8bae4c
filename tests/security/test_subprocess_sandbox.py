"""Attacks from a target's code against the default (subprocess) runner, which runs the worker in
a bubblewrap sandbox: each would succeed against a plain subprocess (no sandbox)."""

from __future__ import annotations

import json
import os
import time

from graphmend.runner import Job
from graphmend.runner.channel import remove_tree
from graphmend.runner.subprocess import SubprocessRunner, bwrap_problem
from tests.security.conftest import drive, plant


def test_bwrap_is_usable_here():
    # Every test below relies on it; CI installs bubblewrap (.ci/run).
    assert bwrap_problem() is None


def test_a_hostile_target_gets_no_secret_no_network_no_write_and_leaves_no_process(tmp_path, monkeypatch, listener):
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    scene = plant(repo, tmp_path, listener.port, scratch / "heartbeat", monkeypatch)
    result = drive("call", "subprocess", str(repo), "tools.hostile:run", "--scratch", str(scratch))
    assert result["ok"], result["error"]
    loot = result["data"]["returned"]
    assert loot["secrets"] == []  # no process it can see holds the parent's secret
    assert not loot["connected"] and listener.accepted == []
    assert loot["written"] == [] and scene.unchanged()
    # No capability left (started by root, bwrap would keep them all), so no read-only bind
    # (the tree, GraphMend's package) can be remounted read-write; the host's TLS keys stay out.
    assert loot["capabilities"] == 0 and loot["remounted"] == []
    assert not loot["host_tls_keys"]
    assert scene.secret not in json.dumps(result)
    # The daemon it double-forked ended with the job: its heartbeat stops growing.
    beats = scene.heartbeat.read_text() if scene.heartbeat.exists() else ""
    time.sleep(1.0)
    assert (scene.heartbeat.read_text() if scene.heartbeat.exists() else "") == beats


def test_sandbox_memory_is_enforced(tmp_path):
    runner = SubprocessRunner(memory="256m")
    result = runner.run(Job(task="selftest", payload={"action": "allocate", "bytes": 512 * 1024 * 1024}, root=tmp_path,
                            timeout_s=60))
    assert not result.ok and "MemoryError" in result.error
    small = runner.run(Job(task="selftest", payload={"action": "allocate", "bytes": 32 * 1024 * 1024}, root=tmp_path,
                           timeout_s=60))
    assert small.ok, small.error


def test_a_flood_of_output_does_not_grow_the_parent(tmp_path):
    """A target printing 300 MB to stderr: the parent (a fresh process measuring its own peak
    RSS) stays under 400 MB, and the tail it keeps says how much was cut."""
    report = drive("print", "subprocess", str(tmp_path), str(300 << 20))
    assert report["ok"], report["error"]
    assert report["peak_rss_mb"] < 400, report["peak_rss_mb"]
    assert "bytes before this cut" in report["stderr_tail"] and len(report["stderr_tail"]) < 5000


def test_the_worker_sees_neither_home_nor_the_runner_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "secret.txt").write_text("s")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = SubprocessRunner().run(Job(task="selftest", payload={"action": "env"}, root=repo, timeout_s=60)).data["env"]
    assert env["HOME"] != str(tmp_path / "home")
    peek = SubprocessRunner().run(Job(task="selftest", payload={"action": "write", "path": str(tmp_path / "home" / "x")},
                                      root=repo, timeout_s=60))
    assert peek.data["written"] is False and not (tmp_path / "home" / "x").exists()
    assert not os.path.exists(tmp_path / "home" / "x")


FILL = '''import os


def run():
    """Write 300 MB into every writable in-memory place of the sandbox; what each took."""
    took = {}
    for folder in ("/tmp", "/dev/shm", "/", "/etc"):
        written = 0
        try:
            with open(os.path.join(folder, "fill"), "wb") as f:
                for _ in range(300):
                    f.write(b"x" * (1 << 20))
                    f.flush()
                    written += 1 << 20
        except OSError:
            pass
        took[folder] = written
        try:
            os.unlink(os.path.join(folder, "fill"))
        except OSError:
            pass
    return took
'''


def test_in_memory_folders_cannot_hold_more_than_sandbox_memory(tmp_path):
    """/tmp, /dev/shm and the sandbox's own root are tmpfs: memory that RLIMIT_AS does not count.
    Each holds at most sandbox.memory, and the root (not a place a job needs) holds nothing."""
    (tmp_path / "fill.py").write_text(FILL)
    result = SubprocessRunner(memory="128m").run(Job(task="selftest", payload={"action": "call", "entry": "fill:run"},
                                                     root=tmp_path, timeout_s=60))
    assert result.ok, result.error
    took = result.data["returned"]
    assert took["/tmp"] <= 128 << 20 and took["/dev/shm"] <= 128 << 20, took
    assert took["/"] == 0 and took["/etc"] == 0, took


def test_the_checkout_s_git_folder_stays_out_of_the_sandbox(tmp_path):
    """actions/checkout persists the job's token in .git/config of the tree the worker imports from."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic czNjcmV0\n')
    (tmp_path / "peek.py").write_text("import os\n\n\ndef run():\n    return os.listdir('.git')\n")
    result = SubprocessRunner().run(Job(task="selftest", payload={"action": "call", "entry": "peek:run"}, root=tmp_path,
                                        timeout_s=60))
    assert result.ok, result.error
    assert result.data["returned"] == [] and "czNjcmV0" not in json.dumps(result.data)


DEEP = '''import os
import sys


def run():
    """Leave a folder 1500 levels deep in the scratch folder the parent removes after the job."""
    fd = os.open(sys.argv[-1], os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    return "planted"
'''


def test_a_scratch_folder_too_deep_for_rmtree_is_still_removed(tmp_path, monkeypatch):
    """shutil.rmtree recurses: a worker's 1500-deep folder made the parent's clean-up raise
    RecursionError out of runner.run (every other target's result lost) and left the folder."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "deep.py").write_text(DEEP)
    (tmp_path / "temp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "temp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    try:
        result = SubprocessRunner().run(Job(task="selftest", payload={"action": "call", "entry": "deep:run"},
                                            root=tmp_path / "repo", timeout_s=60))
        assert result.ok and result.data["returned"] == "planted", result.error
        assert os.listdir(tmp_path / "temp") == []
    finally:
        remove_tree(tmp_path / "temp")  # whatever is left would break pytest's own clean-up of old tmp dirs
