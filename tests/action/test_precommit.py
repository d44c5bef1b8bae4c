"""The pre-commit hook definitions: valid for pre-commit's manifest schema, and their entry, run
the way pre-commit runs it (from the repository root, the changed files appended), warns on a
file with a graph break and passes a clean one — statically, without running any model."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.bot.conftest import BASE_MODEL, HEAD_MODEL

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = {"python", "system"}  # the ones these hooks may use


def hooks() -> list[dict]:
    data = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert isinstance(data, list) and data
    return data


def test_manifest_has_the_fields_pre_commit_requires():
    ids = [h["id"] for h in hooks()]
    assert ids == ["graphmend-check", "graphmend-check-system"]
    for hook in hooks():
        assert {"id", "name", "entry", "language"} <= set(hook), hook
        assert hook["language"] in LANGUAGES and hook["types"] == ["python"]
        assert shlex.split(hook["entry"])[:2] == ["graphmend", "check"]
        assert "--no-dynamic" in hook["entry"]  # static: a hook must not build models


def run_hook(hook: dict, root: Path, files: list[str]) -> subprocess.CompletedProcess:
    argv = shlex.split(hook["entry"])
    argv[0] = str(Path(sys.executable).parent / argv[0])  # the console script pre-commit would find
    return subprocess.run(argv + files, cwd=root, capture_output=True, text=True, timeout=120)


def test_hook_warns_on_a_changed_file_with_a_break_and_passes_a_clean_one(make_repo):
    root = make_repo({"src/model.py": HEAD_MODEL, "src/clean.py": BASE_MODEL})
    for hook in hooks():
        bad = run_hook(hook, root, ["src/model.py"])
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "src/model.py:11:" in bad.stdout and "GB0170" in bad.stdout
        good = run_hook(hook, root, ["src/clean.py"])
        assert good.returncode == 0, good.stdout + good.stderr
        assert "src/model.py" not in good.stdout  # only the files pre-commit passed are checked
