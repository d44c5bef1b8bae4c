"""Dynamic detection on real Dynamo (CPU, eager backend): one break of every category, a
skipped frame, exact sites, and agreement with Dynamo's own ``graph_breaks`` log.

One worker run of a "zoo" target covers every category (each pattern in its own function,
so one break does not hide another); the tests read that one result.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graphmend.config import load_config
from graphmend.detect.dynamic import detect_targets, result_from_data
from graphmend.model import Category, Lever, to_dict
from graphmend.runner import Job
from graphmend.runner.subprocess import SubprocessRunner


# one worker runs this module: its module-scoped fixture runs the targets once
pytestmark = [pytest.mark.xdist_group("test_dynamic"), pytest.mark.slow]

ZOO = '''\
import logging
import sys
import warnings

import torch

logger = logging.getLogger(__name__)


def branch(x):
    if x.sum() > 0:  # <- branch
        x = x + 1
    return x * 2


def validate(x):
    if torch.isnan(x).any():  # <- validate
        raise ValueError("nan in the input")
    return x * 2


def say(x):
    print("shape", x.shape)  # <- print
    return x * 2


def log(x):
    logger.info("step")  # <- logging
    return x * 2


def warn(x):
    warnings.warn("deprecated")  # <- warnings
    return x * 2


def scalar(x):
    n = int(x.sum().item())  # <- item
    return x * 2 + n


def dynshape(x):
    idx = torch.nonzero(x > 0)  # <- nonzero
    return x * 2 + idx.sum()


def unsupported(x):
    y = x * 2
    sys.getrefcount(y)  # <- call
    return y + 1


def guarded(x):
    y = x * 2
    try:
        print("inside try")  # <- try
        y = y + 1
    except RuntimeError:
        pass
    return y


def run_all(x):
    x = branch(x)
    x = validate(x)
    x = say(x)
    x = log(x)
    x = warn(x)
    x = scalar(x)
    x = dynshape(x)
    x = unsupported(x)
    x = guarded(x)
    return x
'''

TARGETS = '''\
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from zoo.model import run_all  # noqa: E402


def zoo(dtype=torch.float32, device="cpu"):
    return run_all, (torch.ones(4, dtype=dtype, device=device),)


def outside(dtype=torch.float32, device="cpu"):
    # a library outside the repository, as site-packages would be
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "zoo_library"))
    import extlib

    def wrapped(x):
        y = x + 1
        print("in tools")  # <- outside
        return extlib.scale(y)

    return wrapped, (torch.ones(2),)


def recompiles(dtype=torch.float32, device="cpu"):
    def step(x, tag):  # <- step
        y = x * len(tag)
        print("step")  # <- step-print
        return y + 1

    def run(x):
        for i in range(12):
            x = step(x, "s" * (i + 1))  # a new constant each call: a recompile each call
        return x

    return run, (torch.ones(2),)
'''

EXTLIB = '''\
import torch


def scale(x):
    if x.max() > 10:
        return x / 10
    return x
'''

CONFIG = '''\
paths: [src/]
targets:
  - {name: zoo, entry: "tools.graphmend_targets:zoo", device: cpu, backend: eager}
  - {name: outside, entry: "tools.graphmend_targets:outside", device: cpu, backend: eager}
  - {name: recompiles, entry: "tools.graphmend_targets:recompiles", device: cpu, backend: eager}
'''


def marker_line(text: str, marker: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return i
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def zoo_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    for rel, text in {"src/zoo/__init__.py": "", "src/zoo/model.py": ZOO, "tools/__init__.py": "",
                      "tools/graphmend_targets.py": TARGETS, "graphmend.yml": CONFIG}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    library = root.parent / "zoo_library"
    library.mkdir(exist_ok=True)
    (library / "extlib.py").write_text(EXTLIB)
    return root


@pytest.fixture(scope="module")
def results(zoo_repo):
    """The zoo through the worker task (to read Dynamo's log of the same run); ``outside``
    through ``detect_targets``, the parent-side entry point."""
    config = load_config(zoo_repo)
    outcome = SubprocessRunner().run(Job(task="detect", root=zoo_repo,
                                         payload={"target": to_dict(config.target("zoo")), "capture_log": True}))
    assert outcome.ok, outcome.error
    zoo = result_from_data("zoo", outcome.data, config, zoo_repo)
    seen = []
    # The "library outside the repository" is a sibling folder put on sys.path, which the bwrap
    # sandbox does not show (it binds only the tree and the Python installation): no sandbox here.
    outside, recompiles = detect_targets(config, ["outside", "recompiles"], runner=SubprocessRunner(sandbox="none"),
                                         progress=lambda name, done, total: seen.append((name, done, total)))
    assert seen == [("outside", 0, 2), ("recompiles", 1, 2), ("", 2, 2)]
    return {"zoo": zoo, "outside": outside, "recompiles": recompiles, "zoo_log": outcome.data["dynamo_log"],
            "zoo_data": outcome.data}


def enclosing_def(text: str, line: int) -> str:
    for source in reversed(text.splitlines()[:line]):
        if source.startswith("def "):
            return source[4:].split("(")[0]
    raise AssertionError(line)


def find(result, line, category):
    hits = [b for b in result.breaks if b.file == "src/zoo/model.py" and b.line == line and b.category is category]
    assert len(hits) == 1, [(b.file, b.line, b.category) for b in result.breaks]
    return hits[0]


CASES = [
    # marker, category, GB id, rule, lever, words of Dynamo's reason
    ("branch", Category.DATA_DEPENDENT_BRANCH, "GB0170", "GM101", Lever.RULE, "data-dependent branching"),
    ("validate", Category.VALIDATION, "GB0170", "GM301", Lever.RULE, "data-dependent branching"),
    ("print", Category.SIDE_EFFECT, "GB0059", "GM201", Lever.RULE, "builtin operator `print`"),
    ("logging", Category.SIDE_EFFECT, "GB0291", "GM202", Lever.RULE, "logging.logger method"),
    ("warnings", Category.SIDE_EFFECT, "GB0007", "GM203", Lever.RULE, "warnings.warn"),
    ("item", Category.SCALAR, "GB0124", None, Lever.CONFIG, "tensor.item()"),
    ("nonzero", Category.DYNAMIC_SHAPE, "GB0036", None, Lever.CONFIG, "output shape depends on input tensor data"),
    ("call", Category.UNSUPPORTED_CALL, "GB0007", None, Lever.NONE, "sys.getrefcount"),
]


@pytest.mark.parametrize("marker, category, gb_id, rule, lever, words", CASES, ids=[c[0] for c in CASES])
def test_category(results, marker, category, gb_id, rule, lever, words):
    zoo = results["zoo"]
    assert zoo.error is None
    line = marker_line(ZOO, marker)
    b = find(zoo, line, category)
    assert (b.gb_id, b.rule, b.lever, b.fixable) == (gb_id, rule, lever, rule is not None)
    assert words in b.reason.lower()
    assert b.verified and not b.outside_paths and b.target == "zoo"
    assert b.source_line == ZOO.splitlines()[line - 1].strip()
    assert b.doc_url == f"https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{gb_id[2:]}.html"
    assert b.function == enclosing_def(ZOO, line)
    # the full user stack, innermost last: the caller, then the function of the site
    assert b.stack[-1].file == "src/zoo/model.py" and b.stack[-1].line == line
    assert b.fingerprint and len({x.fingerprint for x in zoo.breaks}) == len(zoo.breaks)


def test_skipped_frame(results):
    """A break inside ``try`` makes Dynamo give up on the whole function: reported as such."""
    zoo = results["zoo"]
    line = marker_line(ZOO, "try")
    b = find(zoo, line, Category.SKIPPED_FRAME)
    assert "skipped the frame guarded()" in b.reason and "print" in b.reason
    # Dynamo compiled guarded() as a frame of its own; its caller comes from the Python stack
    call = ZOO.splitlines().index("    x = guarded(x)") + 1
    assert [(f.function, f.line) for f in b.stack] == [("run_all", call), ("guarded", line)]
    assert b.gb_id == "GB0059" and b.rule == "GM201"  # fixing the print keeps the frame compiled
    assert zoo.skipped_frames == 1


def test_totals_and_hits(results):
    zoo = results["zoo"]
    # eight categories plus the try block's break and its skipped frame, each one finding
    assert zoo.break_count == len(zoo.breaks) == 10
    assert zoo.graph_count >= 9
    # every break in a helper is hit twice: inlined into run_all, then as the helper's own frame
    assert find(zoo, marker_line(ZOO, "print"), Category.SIDE_EFFECT).hits == 2
    assert zoo.traced_files == ("src/zoo/model.py",)
    assert zoo.environment.backend == "eager" and zoo.environment.torch_version.startswith("2.13")


def test_outside_paths(results, zoo_repo):
    """A break in the repository but outside ``paths`` keeps its repo-relative file; one in a
    library outside the repository is reported there (absolute path), both marked outside paths."""
    out = results["outside"]
    library = str((zoo_repo.parent / "zoo_library" / "extlib.py").resolve())
    assert [(b.file, b.line, b.outside_paths, b.category) for b in out.breaks] == [
        (library, 5, True, Category.DATA_DEPENDENT_BRANCH),
        ("tools/graphmend_targets.py", marker_line(TARGETS, "outside"), True, Category.SIDE_EFFECT),
    ]
    lib_break = out.breaks[0]
    assert [(f.file, f.inside_repo) for f in lib_break.stack] == [
        ("tools/graphmend_targets.py", True), (library, False)]


LOG_AT = re.compile(r"in user code at (\S+):(\d+)")
LOG_FILE = re.compile(r'File "([^"]+)", line (\d+)')


def dynamo_log_sites(messages, root: Path):
    sites = set()
    for m in messages:
        found = LOG_AT.search(m)
        if found:
            where = (found.group(1), found.group(2))
        elif "will skip tracing the frame" in m and LOG_FILE.findall(m):
            where = LOG_FILE.findall(m)[-1]  # a skip logged by convert_frame: innermost user frame last
        else:
            continue
        sites.add((Path(where[0]).resolve().relative_to(root.resolve()).as_posix(), int(where[1])))
    return sites


def test_agrees_with_dynamos_graph_breaks_log(results, zoo_repo):
    """Every site Dynamo's own log names (for the same run) is a finding, and every finding is in the log."""
    logged = dynamo_log_sites(results["zoo_log"], zoo_repo)
    ours = {(b.stack[-1].file, b.stack[-1].line) for b in results["zoo"].breaks}
    assert logged and logged == ours


def test_recompile_limit_is_a_skipped_frame(results):
    """Past ``recompile_limit`` Dynamo runs the function eagerly from then on: a skipped frame
    at the function (Dynamo was not tracing, so there is no deeper stack)."""
    r = results["recompiles"]
    f = "tools/graphmend_targets.py"
    got = [(b.file, b.line, b.category, b.gb_id) for b in r.breaks]
    assert got == [
        (f, marker_line(TARGETS, "step"), Category.SKIPPED_FRAME, "GB0039"),
        (f, marker_line(TARGETS, "step-print"), Category.SIDE_EFFECT, "GB0059"),
        (f, marker_line(TARGETS, "step-print"), Category.SKIPPED_FRAME, "GB7000"),  # run(): a break in its loop
    ]
    limit = r.breaks[0]
    assert "recompile" in limit.reason and "step()" in limit.reason and limit.lever is Lever.NONE
    # compiled once per new constant until the limit (8), then never again
    assert r.breaks[1].hits == 8 and r.skipped_frames == 2


def test_worker_paths_do_not_depend_on_where_the_worker_saw_the_tree(results, zoo_repo, tmp_path):
    """A container mounts the tree elsewhere: the worker sends repo-relative paths, and the
    parent maps them onto its own copy of the tree."""
    import shutil

    data = results["zoo_data"]
    assert all(not Path(f).is_absolute() for f in data["traced_files"])
    copy = tmp_path / "elsewhere"
    shutil.copytree(zoo_repo, copy)
    again = result_from_data("zoo", data, load_config(copy), copy)
    assert again.breaks == results["zoo"].breaks
