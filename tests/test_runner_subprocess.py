"""The subprocess runner: a fresh interpreter per job; every way a job can fail becomes a JobResult."""

import os
import time

from graphmend.runner import Job, allowed_env
from graphmend.runner.subprocess import SubprocessRunner


def run(tmp_path, payload, timeout_s=60, **kw):
    return SubprocessRunner().run(Job(task="selftest", payload=payload, root=tmp_path, timeout_s=timeout_s, **kw))


def test_echo_runs_in_the_repository_root(tmp_path):
    result = run(tmp_path, {"value": [1, "two"]})
    assert result.ok and result.error is None
    assert result.data["echo"] == [1, "two"]
    assert result.data["cwd"] == str(tmp_path.resolve())
    assert result.data["sys_path0"] == str(tmp_path.resolve())


def test_a_raising_task_reports_its_message(tmp_path):
    result = run(tmp_path, {"action": "raise", "message": "factory exploded"})
    assert not result.ok and result.error == "factory exploded"


def test_an_exiting_worker_is_reported_with_its_code(tmp_path):
    result = run(tmp_path, {"action": "exit", "code": 7})
    assert not result.ok and result.returncode == 7
    assert "exited with code 7" in result.error


def test_a_killed_worker_is_reported_with_its_signal(tmp_path):
    result = run(tmp_path, {"action": "kill"})
    assert not result.ok and "SIGKILL" in result.error


def test_a_hanging_worker_is_killed_at_its_timeout(tmp_path):
    started = time.monotonic()
    result = run(tmp_path, {"action": "hang"}, timeout_s=3)
    assert not result.ok and result.timed_out
    assert "timed out after 3 s" in result.error
    assert time.monotonic() - started < 30


def test_unknown_task_is_an_error(tmp_path):
    result = SubprocessRunner().run(Job(task="nope", payload={}, root=tmp_path))
    assert not result.ok and "unknown task 'nope'" in result.error


def test_secrets_never_reach_the_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_planted")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted")
    monkeypatch.setenv("TORCH_SECRET_TOKEN", "planted")
    monkeypatch.setenv("TORCH_LOGS", "graph_breaks")
    env = run(tmp_path, {"action": "env"}).data["env"]
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "TORCH_SECRET_TOKEN" not in env
    assert env["TORCH_LOGS"] == "graph_breaks"
    assert "planted" not in " ".join(env.values())


def test_allow_list_keeps_only_known_names():
    env = allowed_env({"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "MY_VAR": "x", "GH_TOKEN": "t", "OMP_NUM_THREADS": "1"})
    assert env == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "OMP_NUM_THREADS": "1"}


def test_caller_scratch_is_kept(tmp_path):
    scratch = tmp_path / "scratch"
    result = SubprocessRunner().run(Job(task="selftest", payload={"value": 1}, root=tmp_path, scratch=scratch))
    assert result.ok
    assert (scratch / "response.json").is_file() and (scratch / "request.json").is_file()
    assert os.path.isdir(scratch)


def test_without_bwrap_it_runs_unsandboxed_and_says_so_once(tmp_path, capsys, monkeypatch):
    from graphmend.runner import subprocess as runner_mod

    monkeypatch.setattr(runner_mod, "_warned", False)
    plain = SubprocessRunner(bwrap="graphmend-no-such-bwrap")
    assert "not installed" in plain.unsandboxed_reason()
    for _ in range(2):
        assert plain.run(Job(task="selftest", payload={"value": 1}, root=tmp_path)).ok
    assert capsys.readouterr().err.count("isolates crashes, not hostile code") == 1
    required = SubprocessRunner(bwrap="graphmend-no-such-bwrap", sandbox="bwrap").run(
        Job(task="selftest", payload={"value": 1}, root=tmp_path))
    assert not required.ok and "the sandbox is required but bwrap is not installed" in required.error
