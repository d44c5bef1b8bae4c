"""A deferred output followed, in the same compiled graph, by an operation that can fail on the
values it is given: an ``nn.Embedding`` submodule, or a submodule of this file that indexes.

The original prints, then the lookup raises (an id out of range): the text comes out before the
``IndexError``. A ``print`` the runtime makes in the graph (the ordered effectful op of
``_runtime.py``) comes out when the graph runs, before the failing lookup. A ``Logger`` method
is still a record the boundary replays after the graph returns (Dynamo cannot name the logger
while tracing), and the records of a graph that raises are lost: a strict expected failure,
the open hole. Each program is fixed at the default safety (``safe``), then the original and the
fixed program run compiled (backend ``eager``) on a passing call and a failing one.
"""

from __future__ import annotations

import pytest
import torch

from graphmend.transforms.base import RuleContext
from graphmend.transforms.engine import fix_text
from tests.transforms._side_effect_support import compiled_output, load_module

EMBEDDING = '''import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        print("looking up", ids.shape)
        return self.emb(ids)
'''

INDEXING_SUBMODULE = '''import torch


class Gather(torch.nn.Module):
    def forward(self, x, idx):
        return x[idx]


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pick = Gather()

    def forward(self, ids):
        print("looking up", ids.shape)
        return self.pick(torch.arange(10.0), ids)
'''


def _run(module) -> str:
    """A passing lookup, then one with an id out of range."""
    return compiled_output(module, [(torch.tensor([1, 2]),), (torch.tensor([1, 20]),)], "gm_faults")


LOGGED = EMBEDDING.replace("import torch\n", "import logging\n\nimport torch\n\nlog = logging.getLogger('gm_faults')\n", 1) \
    .replace('print("looking up", ids.shape)', 'log.warning("looking up %s", ids.shape)')


@pytest.mark.parametrize("text", [EMBEDDING, INDEXING_SUBMODULE, LOGGED],
                         ids=["embedding", "indexing-submodule", "logger-method"])
def test_output_before_a_failing_lookup_comes_out_before_the_error(tmp_path, text):
    result = fix_text("m.py", text, RuleContext(file="m.py", device="cpu"))  # the default safety: safe
    original = _run(load_module(tmp_path, text))
    assert original == "looking up torch.Size([2])\nlooking up torch.Size([2])\nIndexError\n"  # print or log
    if result.applied:  # a decline (the print stays a graph break) is sound too
        assert _run(load_module(tmp_path, result.text)) == original
