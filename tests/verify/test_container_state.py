"""``verify`` and module state held in a container attribute (a cache list, a dict of tensors).

``output_identity`` knows the inputs and the module's parameters, buffers and tensor attributes,
but not a tensor kept in a list or dict attribute (``self.cache = [...]``, the usual shape of a
key/value cache). A forced rewrite (a hand edit, as ``--unsafe-fixes`` would apply) that returns a
fresh copy where the original returned the cached tensor itself is another program (the caller's
in-place update of the result no longer reaches the cache), and one that no longer updates the
cached tensor in place changes the module's state; verify must name both.
"""

from __future__ import annotations

import pytest

from tests.verify.repo_files import targets_config, verify_forced

pytestmark = pytest.mark.xdist_group("verify_identity")

MODEL = '''\
import torch


class Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = [torch.ones(3)]

    def forward(self, x):
        k = self.cache[0] if x.sum() > 0 else x * 2
        return k


class Updates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {"k": torch.ones(3)}

    def forward(self, x):
        self.cache["k"].add_(x)
        return x * 2
'''

WRONG = {
    # the cached tensor itself becomes a fresh copy of equal values
    "k = self.cache[0] if x.sum() > 0 else x * 2": "k = torch.where(x.sum() > 0, self.cache[0], x * 2)",
    # the in-place update of the cached tensor is lost
    'self.cache["k"].add_(x)': 'k = self.cache["k"] + x',
}

TARGETS = '''\
import torch

from pkg import model


def cached(dtype=torch.float32, device="cpu"):
    return model.Cached(), (torch.ones(3, dtype=dtype),)


def updates(dtype=torch.float32, device="cpu"):
    return model.Updates(), (torch.ones(3, dtype=dtype),)
'''

CONFIG = targets_config(("cached", "updates"), "eager")


def test_a_forced_rewrite_of_container_state_is_caught(make_repo):
    report = verify_forced(make_repo, MODEL, TARGETS, CONFIG, WRONG, grad=False)
    by = {t.name: t for t in report.targets}
    missed = [name for name in ("cached", "updates") if by[name].ok]
    assert not missed, {n: [f"{m.kind}/{m.check}: {m.detail}" for m in by[n].mismatches] for n in by}
