"""A repository of two tiny models, each with its own target, for the affected-targets, shard
and cache tests: target ``ta`` reads ``src/a.py`` (and the data file ``tools/scale.txt``),
target ``tb`` reads ``src/b.py``. Commits have fixed dates, so the base commit is the same in
every test's repository and one cache serves them all."""

from __future__ import annotations

from pathlib import Path

from tests.bot.conftest import commit_all, git

MODEL_A = '''import torch


class A(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return h * 2
'''

# The pull request's graph break: a branch on a tensor's value.
MODEL_A_BROKEN = MODEL_A.replace("        return h * 2\n", "        if h.sum() > 0:\n            h = h + 1\n        return h * 2\n")

MODEL_B = MODEL_A.replace("class A(", "class B(").replace("return h * 2", "return h - 1")

TARGETS = '''import pathlib

import torch


def ta():
    from src.a import A

    scale = float(pathlib.Path("tools/scale.txt").read_text())
    torch.manual_seed(0)
    return A().eval(), (torch.randn(2, 4) * scale,)


def tb():
    from src.b import B

    torch.manual_seed(0)
    return B().eval(), (torch.randn(2, 4),)
'''

CONFIG = """paths: [src/]
targets:
  - {name: ta, entry: 'tools.targets:ta', device: cpu, backend: eager}
  - {name: tb, entry: 'tools.targets:tb', device: cpu, backend: eager}
sandbox:
  timeout_s: 300
"""


def make_base(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "repo"
    for rel, text in {"src/__init__.py": "", "src/a.py": MODEL_A, "src/b.py": MODEL_B, "tools/__init__.py": "",
                      "tools/targets.py": TARGETS, "tools/scale.txt": "1.0\n", "graphmend.yml": CONFIG,
                      "README.md": "# models\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    return root, commit_all(root, "base")


def commit(root: Path, files: dict[str, str], message: str = "head") -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return commit_all(root, message)
