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


def _group(item) -> str:
    marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
    return "_".join(sorted(map(str, marks)))


def _shares_module_work(item) -> bool:
    """The test uses a module-scoped fixture its own module defines: shared, expensive work
    (a CLI or Dynamo run that several tests assert on)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::", 1)[0]
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope in ("module", "class") and fixturedef.baseid == module:
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist (``--dist loadgroup`` in pyproject.toml), and the heavy work first.

    - One docker daemon and one imported base image per test session: every test that needs
      them runs on the same worker.
    - A module whose tests share a module-scoped fixture runs on one worker, so the fixture
      runs once, not once per worker.
    - Work units (a group, or a test on its own) are sent to the workers in collection order
      (``--no-loadscope-reorder``): the docker group and the units holding a test marked
      ``slow`` first, then the other groups, larger ones first, then the tests on their own,
      so that long work does not start last and leave one worker idle while the other ends it.
    """
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif not _group(item) and _shares_module_work(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_group(item) or item.nodeid, []).append(item)
    heavy = {key for key, members in units.items()
             if key.startswith("docker") or any(m.get_closest_marker("slow") for m in members)}
    grouped = {key for key, members in units.items() if _group(members[0])}
    order = sorted(units, key=lambda key: (key not in heavy, key not in grouped, -len(units[key])))
    items[:] = [item for key in order for item in units[key]]


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
