"""``graphmend check`` end to end: exit codes, formats, static and dynamic together."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

A_PY = '''\
import torch
from torch import nn


class Traced(nn.Module):
    def forward(self, x):
        y = x * 2
        print("traced", y.shape)
        return y + 1
'''

B_PY = '''\
import torch
from torch import nn


class NeverRun(nn.Module):
    def forward(self, x):
        y = x * 2
        print("not run by any target", y.shape)
        return y + 1
'''

CLEAN_PY = '''\
import torch
from torch import nn


class Clean(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
'''

TARGETS = '''\
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pkg.a import Traced  # noqa: E402
from pkg.clean import Clean  # noqa: E402


def traced(dtype=torch.float32, device="cpu"):
    return Traced(), (torch.ones(2),)


def clean(dtype=torch.float32, device="cpu"):
    return Clean(), (torch.ones(2),)
'''

CONFIG = '''\
paths: [src/]
targets:
  - {name: traced, entry: "tools.graphmend_targets:traced", device: cpu, backend: eager}
  - {name: clean, entry: "tools.graphmend_targets:clean", device: cpu, backend: eager}
'''


@pytest.fixture
def repo(make_repo):
    return make_repo({"src/pkg/__init__.py": "", "src/pkg/a.py": A_PY, "src/pkg/b.py": B_PY, "src/pkg/clean.py": CLEAN_PY,
                      "tools/__init__.py": "", "tools/graphmend_targets.py": TARGETS, "graphmend.yml": CONFIG})


def graphmend(*args, cwd, **env):
    full_env = dict(os.environ, OMP_NUM_THREADS="1")
    full_env.pop("TORCH_LOGS", None)
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", "graphmend", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=600)


def test_clean_target_exits_0(repo):
    out = graphmend("check", "--target", "clean", "--no-static", "--format", "json", cwd=repo)
    assert out.returncode == 0, out.stderr
    (t,) = json.loads(out.stdout)["targets"]
    assert (t["name"], t["graph_count"], t["break_count"], t["error"]) == ("clean", 1, 0, None)


def test_dynamic_where_traced_static_elsewhere_even_with_torch_logs_set(repo):
    """TORCH_LOGS silences Dynamo's graph_breaks log; the detector does not depend on it."""
    out = graphmend("check", "--target", "traced", "--format", "json", cwd=repo, TORCH_LOGS="recompiles")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    (t,) = report["targets"]
    assert [(b["file"], b["line"], b["rule"], b["verified"]) for b in t["breaks"]] == [("src/pkg/a.py", 8, "GM201", True)]
    assert "src/pkg/a.py" in t["traced_files"]
    # a.py was traced, so static says nothing about it; b.py was not, so static covers it
    assert [(b["file"], b["line"], b["rule"], b["verified"]) for b in report["static"]] == [("src/pkg/b.py", 8, "GM201", False)]


def test_static_only_formats(repo):
    text = graphmend("check", "--no-dynamic", cwd=repo)
    assert text.returncode == 1
    assert "src/pkg/b.py:8:" in text.stdout and "GB0059" in text.stdout and "[fixable (GM201)]" in text.stdout
    github = graphmend("check", "--no-dynamic", "--format", "github", cwd=repo)
    assert github.returncode == 1 and "::warning file=src/pkg/b.py,line=8" in github.stdout
    sarif = json.loads(graphmend("check", "--no-dynamic", "--format", "sarif", cwd=repo).stdout)
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"]


def test_path_argument_narrows_the_static_pass(repo):
    out = graphmend("check", "--no-dynamic", "--format", "json", "src/pkg/clean.py", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["static"] == []


@pytest.mark.parametrize(
    "files, args, words",
    [
        ({"graphmend.yml": "paths: [src/]\ncolour: blue\n"}, [], "graphmend.yml: colour: expected one of the known keys"),
        ({"graphmend.yml": "paths: [src/\n"}, [], "graphmend.yml: (file): expected valid YAML"),
        ({"graphmend.yml": CONFIG}, ["--target", "nope"], "a target named 'nope'"),
        ({}, ["--config", "missing.yml"], "missing.yml: (file): expected a readable YAML file"),
    ],
    ids=["unknown-key", "malformed", "unknown-target", "missing-config"],
)
def test_configuration_errors_exit_2(make_repo, files, args, words):
    root = make_repo({"src/x.py": "x = 1\n", **files})
    out = graphmend("check", *args, cwd=root)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmend check: error: ") and words in lines[0], out.stderr
