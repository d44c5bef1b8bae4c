"""``graphmend fix`` / ``rules`` / ``explain`` end to end: real workers, real Dynamo, real files.

``fix`` on the ``examples/`` repository is in ``tests/test_examples.py`` (one run there serves
every test that asserts on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphmend.schemas import validate
from tests.conftest import REPO

pytestmark = [pytest.mark.xdist_group("test_fix_cli"), pytest.mark.slow]


def graphmend(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "graphmend", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


MODEL = '''\
import torch
from torch import nn

from helpers.scale import rescale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        # keep this comment
        if (h > 100).any():
            h = h.masked_fill(h > 100, 100.0)
        return rescale(h)
'''

HELPER = '''\
import torch


def rescale(h):
    h = h * 0.5  # made here: the caller never gets its own tensor back (that select would be unsafe)
    if h.sum() > 1000:
        h = h.masked_fill(h > 50, 50.0)
    return h
'''

TARGETS = '''\
import torch

from pkg.model import Net


def net(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    return Net().to(dtype=dtype).eval(), (torch.randn(2, 4, dtype=dtype),)
'''


@pytest.fixture
def repo(make_repo):
    return make_repo({
        "pkg/__init__.py": "",
        "pkg/model.py": MODEL,
        "helpers/__init__.py": "",
        "helpers/scale.py": HELPER,
        "tools/__init__.py": "",
        "tools/targets.py": TARGETS,
        "graphmend.yml": "paths: [pkg/]\ntargets:\n  - {name: net, entry: 'tools.targets:net', device: cpu, backend: eager}\n",
    })


def test_fix_writes_in_paths_reports_patch_outside_and_keeps_comments(repo):
    proc = graphmend("fix", "--format", "json", cwd=repo)
    data = json.loads(proc.stdout)
    validate("fix", data)
    assert data["mode"] == "dynamic" and data["verified"] and data["written"] is True
    # helpers/ is outside `paths`: its break stays, so findings remain -> exit 1
    assert proc.returncode == 1, proc.stderr
    [change] = data["changes"]
    assert change["file"] == "pkg/model.py" and change["written"] and change["fixes"] == ["GM101"]
    new = (repo / "pkg/model.py").read_text()
    from graphmend.transforms import _layout_guard

    assert new == MODEL.replace(
        "        if (h > 100).any():\n",
        "        if _graphmend_strided(h):\n"
        "            h = torch.where((h > 100).any(), h.masked_fill(h > 100, 100.0), h)\n"
        "        elif (h > 100).any():\n",
    ).replace("rescale\n\n\n", "rescale\n\n\n" + _layout_guard.helper_code("torch") + "\n\n")
    # the select and its layout guard in front of the kept `if`; the comment above it and everything
    # else byte-identical
    [patch] = data["patches"]
    assert patch["file"] == "helpers/scale.py" and patch["outside_paths"] and not patch["written"]
    assert "+        h = torch.where(h.sum() > 1000, h.masked_fill(h > 50, 50.0), h)" in patch["diff"]
    assert (repo / "helpers/scale.py").read_text() == HELPER
    [target] = data["targets"]
    assert target["breaks_before"] == 2 and target["breaks_after"] == 1
    assert [b["file"] for b in data["remaining"]] == ["helpers/scale.py"]
    assert sorted(b["file"] for b in data["found"]) == ["helpers/scale.py", "pkg/model.py"]
    # fixing again changes nothing (the engine's idempotence on the real file, no worker run)
    from graphmend.model import Safety
    from graphmend.transforms.base import RuleContext
    from graphmend.transforms.engine import fix_text

    again = fix_text("pkg/model.py", new, RuleContext(threshold=Safety.UNSAFE, verified=True), None, {"GM101": range(1, 30)})
    assert again.text == new and not again.applied


def test_diff_output_is_a_patch_git_applies(make_repo):
    text = ("import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x):\n"
            "        if (x > 0).any():\n            x = x.masked_fill(x > 1, 1.0)\n        return x + 1\n")
    root = make_repo({"src/m.py": text, "graphmend.yml": "paths: [src/]\n"})
    proc = graphmend("fix", "--diff", "--unsafe-fixes", cwd=root)
    assert proc.stdout.startswith("--- a/src/m.py\n+++ b/src/m.py\n") and "fix(es) applied" in proc.stderr
    assert (root / "src/m.py").read_text() == text  # --diff writes nothing
    subprocess.run(["git", "apply", "-"], input=proc.stdout, text=True, cwd=root, check=True)
    assert "x = torch.where((x > 0).any(), x.masked_fill(x > 1, 1.0), x)" in (root / "src/m.py").read_text()
    assert proc.returncode == 0


def test_static_mode_needs_unsafe_and_says_unverified(make_repo):
    text = ("import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def forward(self, x):\n"
            "        if (x > 0).any():\n            x = x.clamp(max=1.0)\n        return x + 1\n")
    root = make_repo({"src/m.py": text, "src/bad.py": "def broken(:\n", "src/bin.py": "x = 1\0\n",
                      "graphmend.yml": "paths: [src/]\n"})
    proc = graphmend("fix", cwd=root)
    assert proc.returncode == 1
    assert "unverified" in proc.stdout and (root / "src/m.py").read_text() == text
    proc = graphmend("fix", "--unsafe-fixes", "--format", "json", cwd=root)
    data = json.loads(proc.stdout)
    validate("fix", data)
    assert data["mode"] == "static" and data["verified"] is False
    assert "_graphmend_select((x > 0).any(), x.clamp(max=1.0), x)" in (root / "src/m.py").read_text()
    # unusable files are reported, one line each, and left alone; the run went on
    assert {e["path"] for e in data["errors"]} >= {"src/bin.py"}
    assert (root / "src/bad.py").read_text() == "def broken(:\n"
    assert proc.returncode == 1


def test_usage_errors_exit_2(repo):
    proc = graphmend("fix", "--target", "nope", cwd=repo)
    assert proc.returncode == 2 and "nope" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert graphmend("explain", "GM999", cwd=repo).returncode == 2


def test_rules_and_explain(repo):
    proc = graphmend("rules", "--format", "json", cwd=repo)
    rows = json.loads(proc.stdout)["rules"]
    gm101 = next(r for r in rows if r["code"] == "GM101")
    assert gm101["name"] == "data-dependent-branch" and gm101["safety"] == "safe"
    text = graphmend("explain", "gm101", cwd=repo).stdout
    for section in ("What it does", "Why it breaks the graph", "Example", "Use instead", "Fix safety", "References"):
        assert f"## {section}" in text
    assert "import torch" not in graphmend("rules", cwd=repo).stderr


def test_rules_do_not_import_torch():
    code = "import sys; from graphmend.cli import main; main(['rules']); main(['explain', 'GM101']); print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_readme_rule_table_is_current():
    proc = subprocess.run([sys.executable, "scripts/gen_rule_table.py", "--check"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
