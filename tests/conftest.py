"""Shared test fixtures. Dynamo tests use the eager/aot_eager backends; inductor is for bench scripts."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
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
        units.setdefault(_unit(item), []).append(item)
    heavy = {key for key, members in units.items()
             if key.startswith("docker") or any(m.get_closest_marker("slow") for m in members)}
    grouped = {key for key, members in units.items() if _group(members[0])}
    order = sorted(units, key=lambda key: (key not in heavy, key not in grouped, -len(units[key])))
    items[:] = [item for key in order for item in units[key]]
    _write_units(config, items)


def _unit(item) -> str:
    return _group(item) or item.nodeid


# pytest-xdist's loadgroup tells its scheduler a test's group by appending "@group" to the test's
# node id in the worker, which pytest 9.2 no longer lets a plugin do (pytest-xdist issue #1386):
# silently, every test becomes a unit of its own, and a module's shared fixture runs on both
# workers (or again after another module's test). So the units travel on their own: each worker
# writes every test's unit to a file the controller named, and the controller's scheduler reads it.
UNITS_DIR = "graphmend_units_dir"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    config = node.config
    if not hasattr(config, "_graphmend_units_dir"):
        # beside the workers' own temp folders (pytest-xdist puts them there too): pytest prunes old sessions'
        factory = getattr(config, "_tmp_path_factory", None)
        folder = factory.getbasetemp() / "xdist-units" if factory else Path(tempfile.mkdtemp(prefix="graphmend-xdist-"))
        folder.mkdir(exist_ok=True)
        config._graphmend_units_dir = str(folder)
    node.workerinput[UNITS_DIR] = config._graphmend_units_dir


def _write_units(config, items) -> None:
    """In a worker: every test's unit, written before the worker reports its collection. (Where
    pytest-xdist does manage to append "@group" to a node id, its own loadgroup rule applies.)"""
    folder = getattr(config, "workerinput", {}).get(UNITS_DIR)
    if folder:
        path = Path(folder) / f"{config.workerinput['workerid']}.json"
        path.with_suffix(".tmp").write_text(json.dumps({item.nodeid: _unit(item) for item in items}))
        path.with_suffix(".tmp").replace(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class UnitScheduling(LoadGroupScheduling):
        """loadgroup, with each test's unit read from what the workers wrote."""

        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:
                self.units = {}
                folder = getattr(config, "_graphmend_units_dir", None)
                for path in sorted(Path(folder).glob("*.json")) if folder else ():
                    self.units = json.loads(path.read_text())  # every worker collected the same tests
                    break
            return self.units.get(nodeid) or super()._split_scope(nodeid)

    return UnitScheduling(config, log)


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
