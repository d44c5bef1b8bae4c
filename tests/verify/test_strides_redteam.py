"""Attacks on verify's strides fact (an output that is not contiguous carries its strides): a
rewrite that keeps every layout but removes a graph break (one graph where the original had
two, aot_eager, with gradients) is not reported, for transposed, expanded, channels_last,
size-1 and size-0 outputs in a dict and a ModelOutput; a hand edit that lays a channels_last
output out contiguously is caught, eager and compiled, and so is a cache attribute of module state
laid out contiguously where the original kept a transpose."""

from __future__ import annotations

import pytest

from tests.verify.repo_files import targets_config, verify_forced

pytestmark = pytest.mark.xdist_group("verify_strides_redteam")

MODEL = '''\
import torch
from transformers.utils import ModelOutput


class Layouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2, 3, 4, 5))

    def forward(self, x):
        y = x * self.w
        torch._dynamo.graph_break()
        return {
            "t": y[0, 0].t(),
            "expanded": y[:1, :1, :1].expand(2, 3, 4, 5),
            "channels_last": y.contiguous(memory_format=torch.channels_last),
            "size1": y[:1, :, :1].transpose(1, 3),
            "size0": y[:, :0].transpose(0, 2),
            "output": ModelOutput(slice=y[:, ::2], plain=y),
        }


class Channels(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x.contiguous(memory_format=torch.channels_last))
'''

EDITS = {
    # a correct rewrite: the graph break goes, every output keeps its layout
    "        torch._dynamo.graph_break()\n": "",
    # a wrong one: the channels_last result becomes contiguous (equal values)
    "torch.relu(x.contiguous(memory_format=torch.channels_last))":
        "torch.relu(x.contiguous(memory_format=torch.channels_last)).contiguous()",
}

TARGETS = '''\
import torch

from pkg import model


def layouts(dtype=torch.float32, device="cpu"):
    return model.Layouts(), (torch.randn(2, 3, 4, 5, dtype=dtype),)


def channels(dtype=torch.float32, device="cpu"):
    return model.Channels(), (torch.randn(2, 3, 4, 5, dtype=dtype),)
'''


def test_layouts_kept_across_a_removed_break_pass_and_a_lost_channels_last_is_caught(make_repo):
    report = verify_forced(make_repo, MODEL, TARGETS, targets_config(("layouts", "channels"), "aot_eager"), EDITS,
                           grad=True)
    by = {t.name: t for t in report.targets}
    assert by["layouts"].ok, [f"{m.kind}/{m.check}: {m.detail}" for m in by["layouts"].mismatches]
    found = [f"{m.kind}/{m.check}: {m.detail}" for m in by["channels"].mismatches]
    assert not by["channels"].ok
    for mode in ("eager", "compiled"):
        assert f"output/{mode}: out.strides: '<absent>' != '(60, 1, 15, 3)'" in found, found


CACHE = '''\
import torch


class Cache(torch.nn.Module):
    def forward(self, x):
        self.keys = (x * 2).t()
        return x + 1
'''

CACHE_TARGETS = '''\
import torch

from pkg import model


def cache(dtype=torch.float32, device="cpu"):
    return model.Cache(), (torch.randn(3, 4, dtype=dtype),)
'''


def test_a_cache_attribute_made_contiguous_is_caught(make_repo):
    report = verify_forced(make_repo, CACHE, CACHE_TARGETS, targets_config(("cache",), "aot_eager"),
                           {"(x * 2).t()": "(x * 2).t().contiguous()"}, grad=False)
    (target,) = report.targets
    assert not target.ok
    details = [m.detail for m in target.mismatches]
    assert any("module state keys after the call: strides contiguous instead of (1, 4)" in d for d in details), details
