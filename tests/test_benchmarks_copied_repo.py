"""The benchmark tables' copied-package repository: packages under ``src/``, the targets module, a
``graphmend.yml`` the product reads (with a target's compile-site settings), all committed."""

from __future__ import annotations

import importlib
import sys

from benchmarks.copied_repo import make_repo
from graphmend.config import load_config
from tests.conftest import git


def test_make_repo_copies_the_package_writes_the_targets_and_commits(tmp_path, monkeypatch):
    pkg = tmp_path / "lib" / "tinylib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def f(x):\n    return x + 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.pyc").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    tinylib = importlib.import_module("tinylib")
    try:
        root = make_repo(tmp_path / "repo", [tinylib], "def a():\n    pass\n", {"first": "a", "second": "a"},
                         timeout_s=60, settings={"second": ["capture_scalar_outputs", "capture_dynamic_output_shape_ops"]})
    finally:
        sys.modules.pop("tinylib", None)

    assert (root / "src" / "tinylib" / "__init__.py").read_text() == "def f(x):\n    return x + 1\n"
    assert not (root / "src" / "tinylib" / "__pycache__").exists()
    assert (root / "tools" / "graphmend_targets.py").read_text() == "def a():\n    pass\n"
    assert git(root, "status", "--porcelain").strip() == ""  # everything committed: verify compares with HEAD
    config = load_config(root)
    assert config.paths == ("src/",) and config.fix.safety == "safe" and config.sandbox.timeout_s == 60
    targets = {t.name: t for t in config.targets}
    assert [t.entry for t in config.targets] == ["tools.graphmend_targets:a"] * 2
    assert targets["first"].dynamo_config == ()
    assert targets["second"].dynamo_config == ("capture_dynamic_output_shape_ops", "capture_scalar_outputs")
    assert all(t.device == "cpu" and t.dtype == "float32" and t.backend == "eager" for t in config.targets)
