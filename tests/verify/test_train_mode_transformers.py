"""verify on a real library's train-mode target (a tiny BERT from transformers, random weights
from its config, dropout on) whose original is not deterministic: identical trees are "no
source change"; a real rewrite (the data-dependent branch as GM101 predicates it) is
equivalent, and the report names the original's own nondeterminism with its size instead of
printing an unexplained error next to "equivalent"."""

from __future__ import annotations

import pytest

from graphmend.config import load_config
from graphmend.model import to_dict
from graphmend.report.markdown_verify import render_verify_text
from graphmend.schemas import validate
from graphmend.verify import verify

pytest.importorskip("transformers")

MODEL = '''\
import torch
from transformers import BertConfig, BertModel


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=16)
        self.bert = BertModel(config)
        self.head = torch.nn.Linear(16, 4)
        self.train()  # dropout on

    def forward(self, ids, mask):
        h = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        if (h.abs() > 2).any():
            h = h.clamp(-2, 2)
        # Units are re-initialised at random, from a generator the OS seeds.
        g = torch.Generator()
        g.seed()
        h = h + torch.rand(h.shape, generator=g) * 1e-3
        return self.head(h)
'''

BRANCH = "        if (h.abs() > 2).any():\n            h = h.clamp(-2, 2)\n"
PREDICATED = "        h = torch.where((h.abs() > 2).any(), h.clamp(-2, 2), h)\n"

TARGETS = '''\
import torch

from pkg.model import Tagger


def tagger(dtype=torch.float32, device="cpu"):
    ids = torch.randint(0, 64, (2, 8))
    return Tagger(), (ids, torch.ones(2, 8, dtype=torch.long))
'''

CONFIG = '''\
paths: [pkg/]
targets:
  - {name: tagger, entry: "tools.targets:tagger", device: cpu, backend: eager, mode: train}
'''


@pytest.mark.slow
def test_train_mode_bert_identical_trees_then_a_real_rewrite(make_repo):
    root = make_repo({"pkg/__init__.py": "", "pkg/model.py": MODEL, "tools/__init__.py": "", "tools/targets.py": TARGETS,
                      "graphmend.yml": CONFIG})
    config = load_config(root)
    same = verify(config, count_breaks=False)
    assert same.source_changed is False and not same.targets and not same.failed
    assert "no source change: the working tree is identical to HEAD" in render_verify_text(same)

    assert BRANCH in MODEL
    (root / "pkg/model.py").write_text(MODEL.replace(BRANCH, PREDICATED))
    report = verify(config, count_breaks=False)
    validate("verify", to_dict(report))
    (target,) = report.targets
    assert target.ok, target.mismatches
    assert target.environment.mode == "train"
    assert target.baseline and target.baseline[0].startswith("the original is not deterministic")
    assert 0 < target.baseline_spread_eager < 0.05
    # the rewrite's own difference stays within that spread, and is what the report shows
    assert target.max_abs_error_eager <= 2 * target.baseline_spread_eager + 1e-6
    text = render_verify_text(report)
    assert "tagger: equivalent" in text and "baseline: the original is not deterministic" in text
