"""A tiny model repository with a tensor-dependent branch, a print and a validation guard."""

from __future__ import annotations

MODEL = '''\
import logging

import torch

log = logging.getLogger("toy")


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if x.sum() > 0:
            y = h * 2
        else:
            y = h - 1
        print("toy forward")
        log.warning("scaled")
        return self.guard(y)

    def guard(self, y):
        if (y.abs() > 1000).any():
            raise ValueError("activation too large")
        return y, {"mean": y.mean()}
'''

TARGETS = '''\
import torch

from pkg.model import Toy


def toy(dtype=torch.float32, device="cpu", batch=2):
    return Toy().to(dtype), (torch.randn(batch, 4, dtype=dtype),)


def cases(dtype=torch.float32, device="cpu"):
    return [
        ((torch.full((2, 4), 0.5, dtype=dtype),), {}),
        ((torch.full((2, 4), -0.5, dtype=dtype),), {}),
        ((torch.full((2, 4), 1.0e5, dtype=dtype),), {}),
    ]
'''

CONFIG = '''\
paths: [pkg/]
targets:
  - name: toy
    entry: tools.targets:toy
    device: cpu
    backend: eager
    inputs: tools.targets:cases
'''


def files(model: str = MODEL) -> dict[str, str]:
    return {
        "pkg/__init__.py": "",
        "pkg/model.py": model,
        "tools/__init__.py": "",
        "tools/targets.py": TARGETS,
        "graphmend.yml": CONFIG,
    }


BRANCH = '''\
        if x.sum() > 0:
            y = h * 2
        else:
            y = h - 1
'''
WHERE = "        y = torch.where(x.sum() > 0, h * 2, h - 1)\n"
SWAPPED = "        y = torch.where(x.sum() > 0, h - 1, h * 2)\n"


def targets_config(names, backend: str) -> str:
    """graphmend.yml for ``pkg/`` with one CPU target per name, ``tools.targets:<name>``."""
    return "paths: [pkg/]\ntargets:\n" + "".join(
        f'  - {{name: {n}, entry: "tools.targets:{n}", device: cpu, backend: {backend}}}\n' for n in names)


def verify_forced(make_repo, model: str, targets: str, config: str, wrong: dict, *, grad: bool):
    """Commit ``model`` as pkg/model.py, apply the hand edits ``wrong`` (old -> new) to the working
    tree, and run ``verify`` of HEAD against it: the report on a forced wrong rewrite."""
    from graphmend.config import load_config
    from graphmend.verify import verify

    root = make_repo({"pkg/__init__.py": "", "pkg/model.py": model, "tools/__init__.py": "", "tools/targets.py": targets,
                      "graphmend.yml": config})
    text = model
    for old, new in wrong.items():
        assert old in text, old
        text = text.replace(old, new)
    (root / "pkg/model.py").write_text(text)
    return verify(load_config(root), base="HEAD", count_breaks=False, grad=grad)
