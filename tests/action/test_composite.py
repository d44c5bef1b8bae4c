"""The composite action run step by step as the runner runs it (``tests/action/runner.py``):
inputs as env, an event payload file, ``GITHUB_OUTPUT`` / ``GITHUB_STEP_SUMMARY`` files.

One pull request goes through the whole product path: on ``pull_request`` the action installs
GraphMend into an isolated venv (reusing this venv's torch through a .pth, no index) and runs
``graphmend pr`` on the head commit; on ``workflow_run`` it posts that review.json to the local
GitHub API server (which validates every request against GitHub's OpenAPI description); on
``schedule`` it scans and writes SARIF. The venv is installed once and reused by the later
events, the way the action's install step skips a venv it already made.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from action.workflow import SUMMARY_LIMIT
from tests.action.runner import run_action
from tests.bot.conftest import REPO_NAME, TOKEN, github, pr_repo, server  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner_temp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runner-temp")


@pytest.fixture(scope="module")
def build_backend(tmp_path_factory) -> Path:
    """A wheelhouse with only the build backend (pyproject's build-system.requires)."""
    import subprocess

    dest = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "-d", str(dest),
                           "setuptools>=68", "wheel"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return dest


WHEELHOUSE: list[Path] = []


def runner_env() -> dict[str, str]:
    # The "runner's Python" is this venv's (it has torch). pip may not reach any index: only the
    # build backend is offered, so every runtime dependency must come from the reused site-packages.
    path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    return {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(WHEELHOUSE[0]) if WHEELHOUSE else "", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}


def pull_request_event(pr) -> dict:
    return {"action": "synchronize", "number": 1, "repository": {"full_name": REPO_NAME},
            "pull_request": {"number": 1, "head": {"sha": pr.head, "repo": {"full_name": REPO_NAME}},
                             "base": {"sha": pr.base, "repo": {"full_name": REPO_NAME}}}}


def annotations(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("::warning ")]


@pytest.mark.slow
def test_pull_request_then_workflow_run_then_schedule_then_a_failing_pr(github, pr_repo, runner_temp, build_backend):  # noqa: F811
    WHEELHOUSE[:] = [build_backend]
    # -- pull_request: analysis, read-only, writes review.json -------------------------------
    # The sandbox input overrides graphmend.yml (the repository has none) through a merged copy.
    pr = run_action(REPO, inputs={"sandbox": "subprocess", "comment": "always"},
                    event_name="pull_request", event=pull_request_event(pr_repo),
                    workspace=pr_repo.root, temp=runner_temp, token="", env=runner_env())
    assert pr.steps[0].code == 0, pr.steps[0].log[-3000:]
    install, run = pr.steps
    assert "Reusing the runner's torch" in install.log
    assert install.outputs["python"] == str(runner_temp / "graphmend-venv" / "bin" / "python")
    assert "mode=pr event=pull_request" in run.log
    assert "::group::GraphMend: graphmend pr" in run.log and "::endgroup::" in run.log

    review = json.loads((pr_repo.root / "review.json").read_text())
    assert review["head_sha"] == pr_repo.head and review["base_sha"] == pr_repo.base
    merged = runner_temp / "graphmend-action.yml"
    assert f"--config {merged}" in run.log and "runner: subprocess" in merged.read_text()
    assert "comment" not in merged.read_text()  # review settings come from the base branch in pr
    new = [f for f in review["findings"] if f["status"] == "introduced" and not f["baselined"]]
    assert new, review["findings"]  # HEAD_MODEL adds data-dependent branches
    assert pr.outputs["new-breaks"] == str(len(new))
    assert pr.outputs["fixed-breaks"] == "0"
    assert pr.outputs["review-url"] == ""
    assert run.code == 1  # the gate: the pull request adds breaks
    warned = annotations(run.log)
    assert warned and all("file=src/model.py,line=" in w for w in warned)
    assert {int(w.split("line=")[1].split(",")[0]) for w in warned} <= {f["line"] for f in new}
    assert run.summary and len(run.summary.encode()) < SUMMARY_LIMIT
    assert github.reviews_of(1) == []  # pr never posts

    # -- workflow_run: the trusted poster, PR found by head SHA (pull_requests is empty for forks)
    event = {"action": "completed", "repository": {"full_name": REPO_NAME},
             "workflow_run": {"id": 42, "event": "pull_request", "head_sha": pr_repo.head, "pull_requests": []}}
    post = run_action(REPO, inputs={"github-token": TOKEN, "comment": "never"}, event_name="workflow_run", event=event,
                      workspace=pr_repo.root, temp=runner_temp, token="ghs_default_job_token",
                      env={**runner_env(), "GITHUB_API_URL": github.url, "GITHUB_SERVER_URL": "https://github.example",
                           "GITHUB_REPOSITORY": REPO_NAME})
    install, run = post.steps
    assert "already installed" in install.log  # same RUNNER_TEMP: the venv is reused
    assert "mode=post event=workflow_run" in run.log
    reviews = github.reviews_of(1)
    assert len(reviews) == 1 and reviews[0].commit_id == pr_repo.head
    assert post.outputs["review-url"] == f"https://github.example/{REPO_NAME}/pull/1#pullrequestreview-{reviews[0].id}"
    assert post.outputs["new-breaks"] == str(len(new))
    assert github.issue_comments_of(1) == []  # comment: never reached post (no sticky comment)
    assert run.code == 1  # the gate, again from the findings
    assert run.summary and ghs_not_leaked(post.log)

    # -- schedule: the scan writes SARIF and a summary, and handles the fix pull request -------
    scan = run_action(REPO, inputs={"sarif-file": "out/graphmend.sarif", "github-token": TOKEN}, event_name="schedule",
                      event={"schedule": "17 3 * * 1", "repository": {"full_name": REPO_NAME}},
                      workspace=pr_repo.root, temp=runner_temp, token="ghs_default_job_token",
                      env={**runner_env(), "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": REPO_NAME,
                           "GITHUB_REF_NAME": "feature"})
    _, run = scan.steps
    assert "mode=scan event=schedule" in run.log
    assert f"--pull-request --repo {REPO_NAME} --api-url {github.url}" in run.log
    sarif = json.loads((pr_repo.root / "out" / "graphmend.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    results = [r for r_ in sarif["runs"] for r in r_["results"]]
    assert results and scan.outputs["new-breaks"] == str(len(results))
    assert scan.outputs["suggestions"] == "0"  # static candidates only: nothing verified, no fix PR
    assert scan.outputs["review-url"] == "" and run.code == 1  # breaks found
    assert run.summary and len(run.summary.encode()) < SUMMARY_LIMIT
    assert ghs_not_leaked(scan.log)
    assert annotations(run.log) and all("file=src/model.py" in w for w in annotations(run.log))

    # -- a pr run that fails must not report a review.json already in the checkout -----------
    # A review.json already in the checkout (committed by the pull request, say) with a commit the
    # repository does not have: graphmend pr refuses the event, and the old file must be gone.
    forged = {"version": 1, "base_sha": pr_repo.base, "head_sha": pr_repo.head, "findings": []}
    (pr_repo.root / "review.json").write_text(json.dumps(forged))
    event = pull_request_event(pr_repo)
    event["pull_request"]["head"]["sha"] = "f" * 40
    result = run_action(REPO, inputs={}, event_name="pull_request", event=event, workspace=pr_repo.root,
                        temp=runner_temp, env=runner_env())
    run = result.steps[-1]
    assert run.id == "run" and run.code == 2, run.log
    assert not (pr_repo.root / "review.json").exists()
    assert result.outputs["new-breaks"] == "" and "::error title=GraphMend::graphmend pr exited with code 2" in run.log


def ghs_not_leaked(log: str) -> bool:
    return TOKEN not in log and "ghs_default_job_token" not in log


def test_a_bad_input_fails_the_step_naming_it(tmp_path, runner_temp):
    # No install here: the settings are checked before anything runs, so point the run step at
    # this interpreter (the install step's output) and run only that step's script.
    from tests.action import runner as runner_mod

    spec_steps = runner_mod.yaml.safe_load((REPO / "action.yml").read_text())["runs"]["steps"]
    assert [s["id"] for s in spec_steps] == ["install", "run"]
    env = {**runner_env(), "GITHUB_WORKSPACE": str(tmp_path), "GITHUB_EVENT_NAME": "pull_request",
           "GITHUB_OUTPUT": str(tmp_path / "out"), "GRAPHMEND_PYTHON": sys.executable, "INPUT_MODE": "auto",
           "INPUT_FAIL_ON": "sometimes", "RUNNER_TEMP": str(runner_temp)}
    import subprocess

    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", spec_steps[1]["run"]],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "::error title=GraphMend bad input::input 'fail-on': 'sometimes' is not one of" in proc.stdout
