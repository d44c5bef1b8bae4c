"""Targets that cannot run: each is reported as that target's error, in one clear line, the
others still run, and the exit code says something failed (1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


# one worker runs this module: its module-scoped fixture runs the targets once
pytestmark = [pytest.mark.xdist_group("test_dynamic_bad_inputs"), pytest.mark.slow]

TARGETS = '''\
import os
import signal
import time

import torch


def good(dtype=torch.float32, device="cpu"):
    def fn(x):
        y = x + 1
        print("hello")
        return y * 2

    return fn, (torch.ones(2),)


def raises(dtype=torch.float32, device="cpu"):
    raise RuntimeError("checkpoint not found")


def wrong_shape(dtype=torch.float32, device="cpu"):
    return torch.ones(2)


def hangs(dtype=torch.float32, device="cpu"):
    time.sleep(3600)


def killed(dtype=torch.float32, device="cpu"):
    os.kill(os.getpid(), signal.SIGKILL)


def fails_when_run(dtype=torch.float32, device="cpu"):
    def fn(x):
        return x @ torch.ones(3, 3)  # a shape error in the user's own code

    return fn, (torch.ones(2, 2),)


def fails_compiled(dtype=torch.float32, device="cpu"):
    def fn(x):
        y = x + 1
        if torch.compiler.is_compiling():
            y = y.view(3)  # a shape error only the traced code has: Dynamo raises it while tracing
        return y

    return fn, (torch.ones(2),)
'''

CONFIG = '''\
paths: [tools/]
sandbox: {timeout_s: 60}  # long enough for a loaded machine
targets:
  - {name: no-module, entry: "tools.missing:factory", device: cpu}
  - {name: no-attr, entry: "tools.graphmend_targets:nope", device: cpu}
  - {name: raises, entry: "tools.graphmend_targets:raises", device: cpu}
  - {name: wrong-shape, entry: "tools.graphmend_targets:wrong_shape", device: cpu}
  # its own limit (the time to start a worker and import torch, with room): it waits that out
  - {name: hangs, entry: "tools.graphmend_targets:hangs", device: cpu, timeout_s: 15}
  - {name: killed, entry: "tools.graphmend_targets:killed", device: cpu}
  - {name: fails-when-run, entry: "tools.graphmend_targets:fails_when_run", device: cpu}
  - {name: fails-compiled, entry: "tools.graphmend_targets:fails_compiled", device: cpu}
  - {name: good, entry: "tools.graphmend_targets:good", device: cpu}
'''

EXPECTED = {
    "no-module": ["tools.missing:factory", "importing 'tools.missing' failed", "ModuleNotFoundError"],
    "no-attr": ["tools.graphmend_targets:nope", "has no attribute 'nope'"],
    "raises": ["the factory raised RuntimeError: checkpoint not found"],
    "wrong-shape": ["the factory returned Tensor, expected (callable, args) or (callable, args, kwargs)"],
    "hangs": ["timed out after 15 s"],
    "killed": ["killed by SIGKILL"],
    # the user's own bug fails eagerly too: not blamed on torch.compile
    "fails-when-run": ["the target raised when called, eagerly too (not a torch.compile problem)", "RuntimeError"],
    "fails-compiled": ["the target raised under torch.compile (it runs eagerly without it)", "RuntimeError"],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    (root / "tools").mkdir()
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "graphmend_targets.py").write_text(TARGETS)
    (root / "graphmend.yml").write_text(CONFIG)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "graphmend", "check", "--no-static", "--format", "json"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)
    return proc, json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_target_is_reported_with_its_cause(run, name):
    proc, report = run
    result = next(t for t in report["targets"] if t["name"] == name)
    assert result["breaks"] == [] and result["graph_count"] == 0
    for words in EXPECTED[name]:
        assert words in result["error"], result["error"]
    # one line on stderr naming the target and the cause
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"graphmend check: target {name}: ")]
    assert len(lines) == 1 and EXPECTED[name][-1] in lines[0]


def test_the_good_target_still_runs_and_the_run_fails(run):
    proc, report = run
    assert proc.returncode == 1
    assert sorted(t["name"] for t in report["targets"]) == sorted([*EXPECTED, "good"])
    good = next(t for t in report["targets"] if t["name"] == "good")
    assert good["error"] is None
    assert [(b["file"], b["line"], b["rule"], b["outside_paths"]) for b in good["breaks"]] == [
        ("tools/graphmend_targets.py", 11, "GM201", False)]
