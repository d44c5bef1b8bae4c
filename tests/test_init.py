"""``graphmend init`` writes the repository's own layout into ``paths`` (no invented ``src/``), and
``check`` warns when an entry of ``paths`` matches no file."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml


def graphmend(*args, cwd):
    return subprocess.run([sys.executable, "-m", "graphmend", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _paths(root):
    return yaml.safe_load((root / "graphmend.yml").read_text())["paths"]


@pytest.mark.parametrize("layout, expected", [
    ({"vq/__init__.py": "", "vq/model.py": "", "tests/__init__.py": "", "docs/conf.py": ""}, ["vq/"]),
    ({"src/vq/__init__.py": "", "vq_tools/__init__.py": ""}, ["src/"]),
    ({"model.py": "", "train.py": "", "setup.py": ""}, ["model.py", "train.py"]),
    ({"README.md": ""}, ["."]),
])
def test_init_finds_the_repositorys_code(tmp_path, layout, expected):
    for rel, text in layout.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = graphmend("init", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert _paths(tmp_path) == expected
    assert f"paths: {', '.join(expected)} (" in out.stdout
    # the harness package init writes is not code to rewrite, even on a second run
    assert graphmend("init", "--force", cwd=tmp_path).returncode == 0 and _paths(tmp_path) == expected
    check = graphmend("check", "--no-dynamic", cwd=tmp_path)
    assert "matches no Python file" not in check.stderr or expected == ["."], check.stderr


def test_init_takes_paths_from_the_command_line(tmp_path):
    (tmp_path / "vq").mkdir()
    (tmp_path / "vq" / "__init__.py").write_text("")
    assert graphmend("init", "--src", "lib/", "--src", "vq/", cwd=tmp_path).returncode == 0
    assert _paths(tmp_path) == ["lib/", "vq/"]


def test_check_warns_when_paths_match_no_file(tmp_path):
    (tmp_path / "vq").mkdir()
    (tmp_path / "vq" / "__init__.py").write_text("import torch\n")
    (tmp_path / "graphmend.yml").write_text("paths: [src/, vq/]\n")
    out = graphmend("check", "--no-dynamic", cwd=tmp_path)
    warnings = [line for line in out.stderr.splitlines() if "matches no Python file" in line]
    assert len(warnings) == 1 and "'src/'" in warnings[0] and warnings[0].startswith("graphmend check: warning: "), out.stderr
