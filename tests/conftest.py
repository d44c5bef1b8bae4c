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
# Nor should inductor's compile workers: by default each process that compiles with inductor
# (the demo's benchmark, one per arm and round) first starts a pool of subprocesses, one a CPU,
# each importing torch (~4 s of CPU a process here), to compile a handful of kernels.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


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
    """Groups for pytest-xdist (``--dist loadgroup`` in pyproject.toml), and the longest work first.

    - One docker daemon and one imported base image per test session: every test that needs
      them runs on the same worker.
    - A module whose tests share a module-scoped fixture runs on one worker, so the fixture
      runs once, not once per worker.
    - Work units (a group, or a test on its own) are sent to the workers in collection order
      (``--no-loadscope-reorder``), longest first by the seconds ``tests/durations.json``
      records for their tests (``--store-durations`` refreshes it), so that long work does not
      start last and leave one worker idle while the other ends it. A test the record lacks
      counts as a minute when it is marked ``slow`` or needs docker, else as a typical short
      test; ties go to groups, larger ones first.
    """
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif not _group(item) and _shares_module_work(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    items[:] = work_order(items, _recorded_durations())
    _write_units(config, items)


def work_order(items: list, recorded: dict[str, float]) -> list:
    """``items`` unit by unit, the units longest first (``recorded``: seconds by node id)."""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_unit(item), []).append(item)
    seconds = {key: sum(_expected_seconds(item, recorded) for item in members) for key, members in units.items()}
    grouped = {key for key, members in units.items() if _group(members[0])}
    order = sorted(units, key=lambda key: (-seconds[key], key not in grouped, -len(units[key])))
    return [item for key in order for item in units[key]]


# tests/durations.json: each test's seconds (setup, call and teardown) in one run of the suite on one
# worker, for the tests that took at least RECORD_MIN_S. Only the order of the work depends on it.
DURATIONS = Path(__file__).with_name("durations.json")
RECORD_MIN_S = 1.0
UNRECORDED_S = 0.3  # a test the record lacks: most tests take well under RECORD_MIN_S
UNRECORDED_HEAVY_S = 60.0  # ... unless it is marked slow or needs docker


def _recorded_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def _expected_seconds(item, recorded: dict[str, float]) -> float:
    if item.nodeid in recorded:
        return recorded[item.nodeid]
    if item.get_closest_marker("slow") or _group(item) == "docker":
        return UNRECORDED_HEAVY_S
    return UNRECORDED_S


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help="write the seconds each test took to tests/durations.json (merged into what it holds), "
                          "which orders the work sent to pytest-xdist's workers; tests at least "
                          f"{RECORD_MIN_S:g} s long are kept")


def pytest_runtest_logreport(report):
    """Each test's seconds, in the process that reports (the controller under pytest-xdist)."""
    if _MEASURED is not None:
        _MEASURED[report.nodeid] = _MEASURED.get(report.nodeid, 0.0) + report.duration


_MEASURED: dict[str, float] | None = None


def pytest_sessionstart(session):
    global _MEASURED
    if session.config.getoption("store_durations") and not hasattr(session.config, "workerinput"):
        _MEASURED = {}


def pytest_sessionfinish(session):
    if _MEASURED is None:
        return
    record = _recorded_durations()
    for nodeid, seconds in _MEASURED.items():
        record.pop(nodeid, None)
        if seconds >= RECORD_MIN_S:
            record[nodeid] = round(seconds, 1)
    DURATIONS.write_text(json.dumps(dict(sorted(record.items())), indent=0) + "\n")


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
