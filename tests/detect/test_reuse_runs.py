"""``reusing_runs``: within it a target is detected once per tree content and settings (real
Dynamo, eager backend, one tiny target); outside it, every call runs the worker."""

from __future__ import annotations

import shutil

from graphmend.config import load_config
from graphmend.detect.dynamic import detect_targets, reusing_runs
from graphmend.runner.subprocess import SubprocessRunner
from graphmend.trees import tree_digest

MODEL = '''\
import torch


def run(x):
    if x.sum() > 0:
        x = x + 1
    return x * 2
'''

TARGETS = '''\
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tiny.model import run  # noqa: E402


def tiny(dtype=torch.float32, device="cpu"):
    return run, (torch.ones(4, dtype=dtype, device=device),)
'''

CONFIG = '''\
paths: [src/]
targets:
  - {name: tiny, entry: "tools.graphmend_targets:tiny", device: cpu, backend: eager}
'''


class CountingRunner(SubprocessRunner):
    def __init__(self):
        super().__init__()
        self.runs = 0

    def run(self, job):
        self.runs += 1
        return super().run(job)


def test_a_tree_with_the_same_bytes_is_detected_once_within_the_scope(make_repo, tmp_path):
    root = make_repo({"src/tiny/__init__.py": "", "src/tiny/model.py": MODEL, "tools/__init__.py": "",
                      "tools/graphmend_targets.py": TARGETS, "graphmend.yml": CONFIG})
    config = load_config(root)
    runner = CountingRunner()
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))

    with reusing_runs():
        (a,) = detect_targets(config, runner=runner)
        (b,) = detect_targets(config, root=copy, runner=runner)  # a copy holding the same bytes
        assert runner.runs == 1 and b == a and a.break_count == 1
        # an edited tree runs again, and sees the edit
        (copy / "src/tiny/model.py").write_text(MODEL.replace("    if x.sum() > 0:\n        x = x + 1\n", ""))
        (c,) = detect_targets(config, root=copy, runner=runner)
        assert runner.runs == 2 and c.break_count == 0

    (d,) = detect_targets(config, runner=runner)
    assert runner.runs == 3 and d.breaks == a.breaks  # the scope is over: nothing is reused


def test_the_tree_digest_is_the_bytes_of_every_file_and_link(make_repo, tmp_path):
    root = make_repo({"src/m.py": "x = 1\n", "graphmend.yml": CONFIG})
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
    digest = tree_digest(root)
    assert tree_digest(copy) == digest
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "m.cpython-312.pyc").write_bytes(b"\0")  # written by running the tree
    assert tree_digest(copy) == digest
    for edit in (lambda: (copy / "data.txt").write_text(""), lambda: (copy / "src/m.py").write_text("x = 2\n"),
                 lambda: (copy / "src/m.py").rename(copy / "src/n.py")):
        edit()
        assert tree_digest(copy) != digest
        shutil.rmtree(copy)
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
    (copy / "link").symlink_to("src/m.py")
    linked = tree_digest(copy)
    (copy / "link").unlink()
    (copy / "link").symlink_to("graphmend.yml")
    assert tree_digest(copy) not in (linked, digest)


def test_a_failed_run_is_not_reused(make_repo):
    root = make_repo({"tools/__init__.py": "", "tools/graphmend_targets.py": "def tiny(**kw):\n    raise OSError('no data')\n",
                      "graphmend.yml": CONFIG})
    config = load_config(root)
    runner = CountingRunner()
    with reusing_runs():
        (a,) = detect_targets(config, runner=runner)
        (b,) = detect_targets(config, runner=runner)
    assert a.error and b.error and runner.runs == 2
