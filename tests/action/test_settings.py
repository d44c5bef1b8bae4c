"""action/settings.py (validation, naming the bad input) and action/workflow.py (the runner's
file formats and command escaping), plus the entrypoint's config merge and verb command lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from action import __main__ as entry
from action import settings, workflow


def env_for(tmp_path: Path, event_name: str = "pull_request", event: dict | None = None, **inputs: str) -> dict:
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event if event is not None else
                                     {"pull_request": {"number": 3, "head": {"sha": "h" * 40}, "base": {"sha": "b" * 40}}}))
    env = {"GITHUB_WORKSPACE": str(tmp_path), "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
           "RUNNER_TEMP": str(tmp_path / "temp"), "GITHUB_OUTPUT": str(tmp_path / "out"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")}
    env.update({"INPUT_" + k.upper(): v for k, v in inputs.items()})
    return env


@pytest.mark.parametrize("event,mode", [("pull_request", "pr"), ("workflow_run", "post"), ("schedule", "scan"),
                                        ("workflow_dispatch", "scan"), ("push", "scan")])
def test_auto_mode_follows_the_event(tmp_path, event, mode):
    s = settings.load(env_for(tmp_path, event, github_token="t"))
    assert s.mode == mode


def test_defaults(tmp_path):
    s = settings.load(env_for(tmp_path))
    assert (s.mode, s.fail_on, s.suggestions, s.benchmark) == ("pr", None, None, False)
    assert s.sarif_file == str(tmp_path / "graphmend.sarif") and s.review_file == str(tmp_path / "review.json")
    assert s.overrides() == {}
    assert "github_token" not in repr(s)


@pytest.mark.parametrize("inputs,message", [
    ({"fail_on": "sometimes"}, "input 'fail-on': 'sometimes' is not one of new-breaks, any-break, never"),
    ({"mode": "review"}, "input 'mode': 'review' is not one of auto, pr, post, scan, merge"),
    ({"suggestions": "yes"}, "input 'suggestions': 'yes' is not one of true, false"),
    ({"sandbox": "vm"}, "input 'sandbox': 'vm' is not one of docker, subprocess"),
    ({"sarif_file": "../out.sarif"}, "input 'sarif-file': '../out.sarif' points outside the workspace"),
    ({"config": "../../etc/graphmend.yml"}, "input 'config': '../../etc/graphmend.yml' points outside the workspace"),
    ({"review_file": ""}, "input 'review-file': must not be empty"),
    ({"shard": "5/4"}, "input 'shard': I must be between 1 and N, and N at most 256"),
    ({"shard": "half"}, "input 'shard': expected I/N, e.g. 1/4"),
    ({"mode": "merge", "partials": "../elsewhere"}, "input 'partials': '../elsewhere' points outside the workspace"),
])
def test_bad_inputs_are_named(tmp_path, inputs, message):
    with pytest.raises(settings.SettingsError) as err:
        settings.load(env_for(tmp_path, **inputs))
    assert str(err.value) == message


def test_pull_request_target_is_refused_and_unknown_events_named(tmp_path):
    with pytest.raises(settings.SettingsError, match="refuses pull_request_target"):
        settings.load(env_for(tmp_path, "pull_request_target"))
    with pytest.raises(settings.SettingsError, match="cannot choose a mode for the event 'issue_comment'"):
        settings.load(env_for(tmp_path, "issue_comment"))
    with pytest.raises(settings.SettingsError, match="pr needs a pull_request event payload"):
        settings.load(env_for(tmp_path, "schedule", {"schedule": "x"}, mode="pr"))
    with pytest.raises(settings.SettingsError, match="input 'github-token': empty"):
        settings.load(env_for(tmp_path, "workflow_run", {}, github_token=""))


def test_a_broken_event_file_is_named(tmp_path):
    env = env_for(tmp_path)
    Path(env["GITHUB_EVENT_PATH"]).write_text("{not json")
    with pytest.raises(settings.SettingsError, match="GITHUB_EVENT_PATH: .* is not JSON"):
        settings.load(env)


def test_outputs_survive_any_value(tmp_path):
    out = tmp_path / "out"
    tricky = {"a": "plain", "b": "two\nlines\nEOF", "c": "", "d": "x<<y\nname=value"}
    workflow.write_outputs(out, tricky)
    workflow.write_outputs(out, {"e": "later"})
    assert workflow.read_outputs(out) == {**tricky, "e": "later"}


def test_annotations_cannot_inject_workflow_commands(capsys):
    workflow.command("warning", "bad\n::error::pwned 100%", file="src/a,b:c.py", line=3, title="GraphMend GM101")
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and "\n::error" not in line
    assert line == "::warning file=src/a%2Cb%3Ac.py,line=3,title=GraphMend GM101::bad%0A::error::pwned 100%25\n"


def test_summary_stays_under_the_limit_and_says_it_was_cut(tmp_path):
    path = tmp_path / "summary"
    path.write_text("# earlier step\n")
    big = "".join(f"| row {i} | ✅ naïve |\n" for i in range(80000))  # > 1 MiB, multi-byte characters
    written = workflow.append_summary(path, big)
    data = path.read_bytes()
    assert len(data) <= workflow.SUMMARY_LIMIT < 1024 * 1024 and written < len(big.encode())
    text = data.decode("utf-8")  # the cut is at a line boundary: still valid UTF-8
    assert text.startswith("# earlier step\n") and text.rstrip().endswith("job log and the uploaded files._")
    assert workflow.append_summary(path, "more") <= len(workflow.TRUNCATED_NOTE.encode())


def test_small_summary_is_appended_whole(tmp_path):
    path = tmp_path / "summary"
    assert workflow.append_summary(path, "## GraphMend\n") == len("## GraphMend\n")
    assert path.read_text() == "## GraphMend\n"


def test_merged_config_applies_inputs_over_the_file(tmp_path):
    (tmp_path / "graphmend.yml").write_text("paths: [src/]\nsandbox: {runner: subprocess, timeout_s: 60}\n"
                                           "gate: {fail_on: any-break}\n")
    s = settings.load(env_for(tmp_path, "schedule", {}, sandbox="docker", image="org/img:1", fail_on="never",
                              suggestions="false"))
    merged = yaml.safe_load(entry.merged_config(s).read_text())
    assert merged["paths"] == ["src/"]
    assert merged["sandbox"] == {"runner": "docker", "image": "org/img:1", "timeout_s": 60}
    assert merged["gate"] == {"fail_on": "never"} and merged["review"] == {"suggestions": False}
    from graphmend.config import load_config

    config = load_config(tmp_path, entry.merged_config(s))  # still a valid graphmend.yml
    assert config.sandbox.runner == "docker"


def test_pr_keeps_the_config_name_so_the_gate_is_read_from_the_base(tmp_path):
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "graphmend.yml").write_text("paths: [src/]\n")
    s = settings.load(env_for(tmp_path, config=".github/graphmend.yml", fail_on="any-break"))
    assert entry.merged_config(s) == Path(".github/graphmend.yml")  # fail-on alone: no merged copy
    cmd = entry.verb_command(s, entry.merged_config(s), tmp_path / "summary.md")
    assert cmd[:5] == [sys.executable, "-I", "-m", "graphmend", "pr"]
    assert cmd[cmd.index("--config") + 1] == ".github/graphmend.yml"
    assert cmd[cmd.index("--output") + 1] == str(tmp_path / "review.json") and "--bench" not in cmd


def test_post_passes_fail_on_and_never_a_config(tmp_path):
    s = settings.load(env_for(tmp_path, "workflow_run", {}, github_token="t", fail_on="never",
                              sandbox="docker"))
    assert entry.merged_config(s) is None
    cmd = entry.verb_command(s, None, tmp_path / "s.md")
    assert cmd[4:6] == ["post", s.review_file] and cmd[cmd.index("--fail-on") + 1] == "never"


def test_the_token_reaches_post_but_never_pr(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "job-token")
    monkeypatch.setenv("INPUT_GITHUB_TOKEN", "input-token")
    pr = settings.load(env_for(tmp_path, github_token="input-token"))
    assert "GITHUB_TOKEN" not in entry.child_env(pr)
    assert not any(k.startswith("INPUT_") for k in entry.child_env(pr))
    post = settings.load(env_for(tmp_path, "workflow_run", {}, github_token="input-token"))
    assert entry.child_env(post)["GITHUB_TOKEN"] == "input-token"


def test_post_gets_the_trusted_inputs_as_flags_and_the_artifact_untouched(tmp_path):
    """comment/suggestions/safety reach post as flags (post lets review.json only make them quieter)."""
    review = {"version": 1, "settings": {"safety": "safe", "suggestions": True, "comment": "on-change"}}
    (tmp_path / "review.json").write_text(json.dumps(review))
    summary = tmp_path / "summary.md"
    plain = entry.verb_command(settings.load(env_for(tmp_path, "workflow_run", {}, github_token="t")), None, summary)
    assert not {"--comment", "--suggestions", "--safety"} & set(plain)
    s = settings.load(env_for(tmp_path, "workflow_run", {}, github_token="t", comment="never", suggestions="false",
                              safety="unsafe"))
    cmd = entry.verb_command(s, None, summary)
    assert cmd[4:6] == ["post", s.review_file]
    assert [cmd[cmd.index(f) + 1] for f in ("--comment", "--suggestions", "--safety")] == ["never", "false", "unsafe"]
    assert json.loads((tmp_path / "review.json").read_text()) == review  # the artifact is untouched


def test_pr_merges_only_where_the_code_runs(tmp_path):
    only_review = settings.load(env_for(tmp_path, comment="never", safety="unsafe"))
    assert entry.merged_config(only_review) is None  # the base branch decides those for pr
    sandbox = settings.load(env_for(tmp_path, comment="never", sandbox="docker", image="org/img:1"))
    merged = yaml.safe_load(entry.merged_config(sandbox).read_text())
    assert merged == {"sandbox": {"runner": "docker", "image": "org/img:1"}}


def test_scan_opens_the_fix_pull_request_unless_suggestions_are_off(tmp_path):
    env = {**env_for(tmp_path, "schedule", {}, github_token="t"), "GITHUB_REPOSITORY": "o/r",
           "GITHUB_API_URL": "http://127.0.0.1:1"}
    cmd = entry.verb_command(settings.load(env), None, tmp_path / "s.md")
    assert cmd[4] == "scan" and cmd[cmd.index("--sarif") + 1] == str(tmp_path / "graphmend.sarif")
    assert cmd[cmd.index("--pull-request"):] == ["--pull-request", "--repo", "o/r", "--api-url", "http://127.0.0.1:1"]
    off = entry.verb_command(settings.load({**env, "INPUT_SUGGESTIONS": "false"}), None, tmp_path / "s.md")
    assert "--no-fix" in off and "--pull-request" not in off
    no_token = entry.verb_command(settings.load({**env, "INPUT_GITHUB_TOKEN": ""}), None, tmp_path / "s.md")
    assert "--pull-request" not in no_token


def test_cache_dir_and_shard_reach_pr_and_merge_joins_the_partials_without_a_token(tmp_path):
    s = settings.load(env_for(tmp_path, cache_dir="/runner/temp/graphmend-cache", shard="2/4"))
    cmd = entry.verb_command(s, None, tmp_path / "s.md")
    assert cmd[cmd.index("--cache-dir") + 1] == "/runner/temp/graphmend-cache"
    assert cmd[cmd.index("--shard") + 1] == "2/4"
    plain = entry.verb_command(settings.load(env_for(tmp_path)), None, tmp_path / "s.md")
    assert "--cache-dir" not in plain and "--shard" not in plain
    merged = settings.load(env_for(tmp_path, mode="merge", github_token="t", partials="parts"))
    assert merged.github_token == ""  # merge reads artifacts only
    cmd = entry.verb_command(merged, entry.merged_config(merged), tmp_path / "s.md")
    assert cmd[4:7] == ["merge", str(tmp_path / "parts"), "--format"]
    assert cmd[cmd.index("--output") + 1] == str(tmp_path / "review.json")
