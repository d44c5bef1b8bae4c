"""Shared test fixtures. Dynamo tests use the eager/aot_eager backends; inductor is for bench scripts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.dockerd"]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

# Dynamo and its workers should not fight over the two cores of a CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


DOCKER_FIXTURES = {"docker_client", "docker_base_image", "dockerd"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # One docker daemon and one imported base image per test session: under pytest-xdist every
    # test that needs them runs on the same worker (``--dist loadgroup`` in pyproject.toml).
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))


@pytest.fixture
def make_repo(tmp_path):
    """A real git repository in a temp dir with the given files committed."""

    def make(files: dict[str, str], name: str = "repo") -> Path:
        root = tmp_path / name
        root.mkdir()
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(root, "init", "-q", "-b", "main")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "initial")
        return root

    return make
