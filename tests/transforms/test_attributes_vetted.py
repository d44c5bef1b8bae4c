"""The vetted bases of ``_attributes`` against the installed torch and transformers.

A vetted base is one whose attribute reads are known: a torch.nn class in ``TORCH_BASES`` has no
descriptor and no ``__getattr__``/``__getattribute__``/``__call__``/``__setattr__`` of its own
(nn.Module's are followed as pure), and a class of ``FOREIGN_BASES`` has exactly the getters
listed there as unsafe plus the ones reviewed here as reads only. A new property in a new
release fails here until it is read and listed.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

torch = pytest.importorskip("torch")

from graphmend.transforms import _attributes as A  # noqa: E402
from graphmend.transforms.base import SourceFile  # noqa: E402

SPECIAL = ("__getattr__", "__getattribute__", "__call__", "__setattr__", "__get__")
# Getters of the vetted foreign bases read (transformers 4.52.4) and found to write nothing.
READ_ONLY = {
    "transformers.modeling_utils.PreTrainedModel": {"device", "dtype", "dummy_inputs", "framework", "tp_size"},
    "transformers.generation.utils.GenerationMixin": set(),
    "transformers.modeling_layers.GradientCheckpointingLayer": set(),
}
# Special methods of the vetted foreign bases, read: GradientCheckpointingLayer.__call__ runs
# nn.Module's (or checkpoints it in training with checkpointing on), writing nothing itself.
SPECIAL_READ = {"transformers.modeling_layers.GradientCheckpointingLayer": {"__call__"}}


def _own(cls):
    """(descriptor names, special methods) that the classes of ``cls``'s MRO define, nn.Module's
    and object's aside."""
    descriptors, special = set(), set()
    for k in cls.__mro__:
        if k in (object, torch.nn.Module):
            continue
        for name, value in vars(k).items():
            if name in SPECIAL:
                special.add(name)
            elif name.startswith("__") or inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                continue
            elif hasattr(type(value), "__get__") and not isinstance(value, (int, float, str, bytes, tuple, list, dict,
                                                                            set, frozenset, bool, type(None), type)):
                descriptors.add(name)
    return descriptors, special


@pytest.mark.parametrize("name", sorted(A.TORCH_BASES))
def test_torch_base_reads_run_nothing_of_its_own(name):
    cls = getattr(torch.nn, name)
    assert issubclass(cls, torch.nn.Module)
    assert _own(cls) == (set(), set())


@pytest.mark.parametrize("origin", sorted(A.FOREIGN_BASES))
def test_foreign_base_getters_are_the_reviewed_ones(origin):
    transformers = pytest.importorskip("transformers")
    assert transformers.__version__ == "4.52.4", "vetted for 4.52.4: read the getters of the new release"
    module, _, name = origin.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    descriptors, special = _own(cls)
    assert descriptors - A.FOREIGN_BASES[origin] == READ_ONLY[origin]
    assert special - {"__setattr__"} == SPECIAL_READ.get(origin, set()), special


@pytest.mark.parametrize("path, imports, base, vetted", [
    ("m.py", "import torch", "torch.nn.Module", True),
    ("m.py", "from torch import nn", "nn.Linear", True),
    ("m.py", "import torch.nn as tnn", "tnn.Sequential", True),
    ("m.py", "from torch import nn", "nn.LSTM", False),  # all_weights is a property
    ("m.py", "from transformers import PreTrainedModel", "PreTrainedModel", True),
    ("src/transformers/models/x/modeling_x.py", "from ...modeling_utils import PreTrainedModel", "PreTrainedModel", True),
    ("pkg/models/x/modeling_x.py", "from ...modeling_utils import PreTrainedModel", "PreTrainedModel", False),
    ("m.py", "from mylib import Base", "Base", False),
    ("m.py", "", "Base", False),  # not imported: unknown
])
def test_bases_resolve_through_the_imports(path, imports, base, vetted):
    text = f"{imports}\n\n\nclass Block({base}):\n    def forward(self, x):\n        return x * self.scale\n"
    source = SourceFile(path, text)
    classes = {c.name.value: c for c in source.module.body if type(c).__name__ == "ClassDef"}
    attributes = A.Attributes(source, classes, frozenset(classes))
    why = attributes.read("Block", "scale")
    assert (why is None) == vetted, why
    if not vetted:
        assert base in why
