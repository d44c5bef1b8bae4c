"""verify sees everything a program can change, and judges a rewrite against the original's own
nondeterminism: one real repository, real Dynamo on CPU, a wrong rewrite per check.

Targets (each rewritten by hand, as a forced ``--unsafe-fixes`` would):
- ``inplace``: scales its argument in place; the rewrite stops writing it and writes to stderr;
- ``counter``: counts calls before a validation guard; the rewrite counts after the guard (the
  state after the exception differs) and raises another exception on the compiled path only;
- ``streams``: prints, logs and writes stderr, and counts calls; the rewrite drops the count and
  writes stderr before it prints;
- ``noisy``: adds noise from a generator seeded by the OS (as a random re-initialisation does);
  the rewrite is equivalent, and verify names the original's nondeterminism instead of failing.
"""

from __future__ import annotations

import pytest

from graphmend.config import load_config
from graphmend.model import to_dict
from graphmend.report.markdown_verify import render_verify_markdown, render_verify_text
from graphmend.schemas import validate
from graphmend.verify import verify

MODEL = '''\
import logging
import sys

import torch

log = logging.getLogger("effects")
log.addHandler(logging.NullHandler())  # records are not also written to stderr


class InPlace(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x.sum()


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.fc(x)
        if (y.abs() > 1000).any():
            raise ValueError("activation too large")
        return y


class Streams(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        print("start")
        log.warning("midway")
        sys.stderr.write("note\\n")
        return x + 1


class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        g = torch.Generator()
        g.seed()
        noise = torch.rand(x.shape, generator=g) * 0.01
        return self.fc(x) + noise
'''

WRONG = {
    "        x.mul_(2)\n        return x.sum()\n":
        '        x = x * 2\n        sys.stderr.write("scaled\\n")\n        return x.sum()\n',
    '        self.calls += 1\n        y = self.fc(x)\n        if (y.abs() > 1000).any():\n            raise ValueError("activation too large")\n':
        "        y = self.fc(x)\n        compiling = torch.compiler.is_compiling()\n        if (y.abs() > 1000).any():\n"
        '            if compiling:\n                raise RuntimeError("graphmend-trap: activation too large")\n'
        '            raise ValueError("activation too large")\n        self.calls += 1\n',
    '        self.calls += 1\n        print("start")\n        log.warning("midway")\n        sys.stderr.write("note\\n")\n':
        '        sys.stderr.write("note\\n")\n        print("start")\n        log.warning("midway")\n',
    "        return self.fc(x) + noise\n": "        return torch.add(self.fc(x), noise)\n",
}

TARGETS = '''\
import torch

from pkg import effects


def inplace(dtype=torch.float32, device="cpu"):
    return effects.InPlace(), (torch.arange(4, dtype=dtype),)


def counter(dtype=torch.float32, device="cpu"):
    return effects.Counter(), (torch.ones(2, 4, dtype=dtype),)


def counter_cases(dtype=torch.float32, device="cpu"):
    return [((torch.full((2, 4), 1.0e5, dtype=dtype),), {})]


def streams(dtype=torch.float32, device="cpu"):
    return effects.Streams(), (torch.ones(3, dtype=dtype),)


def noisy(dtype=torch.float32, device="cpu"):
    return effects.Noisy(), (torch.randn(4, 16, dtype=dtype),)
'''

CONFIG = '''\
paths: [pkg/]
targets:
  - {name: inplace, entry: "tools.targets:inplace", device: cpu, backend: eager}
  - {name: counter, entry: "tools.targets:counter", device: cpu, backend: eager, inputs: "tools.targets:counter_cases"}
  - {name: streams, entry: "tools.targets:streams", device: cpu, backend: eager}
  - {name: noisy, entry: "tools.targets:noisy", device: cpu, backend: eager}
'''


def wrong_model() -> str:
    text = MODEL
    for old, new in WRONG.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.mark.slow
def test_identical_trees_then_every_wrong_rewrite_is_caught(make_repo):
    root = make_repo({"pkg/__init__.py": "", "pkg/effects.py": MODEL, "tools/__init__.py": "", "tools/targets.py": TARGETS,
                      "graphmend.yml": CONFIG})
    config = load_config(root)

    # Nothing changed: said at once, nothing run, not a failure.
    same = verify(config, base="HEAD", count_breaks=False)
    validate("verify", to_dict(same))
    assert same.source_changed is False and not same.targets and not same.failed
    assert "no source change" in render_verify_text(same) and "no source change" in render_verify_markdown(same)

    (root / "pkg/effects.py").write_text(wrong_model())
    report = verify(config, base="HEAD", count_breaks=False)
    validate("verify", to_dict(report))
    assert report.source_changed is True and report.changed_files == ("pkg/effects.py",)
    by = {t.name: t for t in report.targets}
    kinds = {name: {(m.kind, m.check, m.case) for m in t.mismatches} for name, t in by.items()}

    # An argument no longer written in place; a new stderr line.
    assert not by["inplace"].ok
    assert {("input", "eager", "example"), ("input", "compiled", "example"), ("stderr", "eager", "example")} <= kinds["inplace"]
    detail = next(m.detail for m in by["inplace"].mismatches if m.kind == "input")
    assert "args[0] is written by the original, not by the rewrite" in detail

    # The counter after the exception; the compiled path's exception (the eager one is unchanged).
    assert not by["counter"].ok
    assert {("state", "eager", "inputs[0]"), ("state", "compiled", "inputs[0]"), ("exception", "compiled", "inputs[0]")} <= kinds["counter"]
    assert ("exception", "eager", "inputs[0]") not in kinds["counter"]
    assert not any(m.case == "example" for m in by["counter"].mismatches)  # the passing input: same state, same output
    exc = next(m.detail for m in by["counter"].mismatches if m.kind == "exception")
    assert "RuntimeError instead of ValueError" in exc
    state = next(m.detail for m in by["counter"].mismatches if m.kind == "state")
    assert "calls is written by the original, not by the rewrite" in state

    # A dropped `self.calls += 1`; a log record moved before the print it followed.
    assert not by["streams"].ok
    assert {("state", "eager", "example"), ("order", "eager", "example")} <= kinds["streams"]
    order = next(m.detail for m in by["streams"].mismatches if m.kind == "order")
    assert "stderr, stdout, log instead of stdout, log, stderr" in order

    # The original is not deterministic; an equivalent rewrite is judged within its spread.
    noisy = by["noisy"]
    assert noisy.ok, noisy.mismatches
    assert noisy.baseline and "the original is not deterministic" in noisy.baseline[0]
    assert 0.005 < noisy.baseline_spread_eager < 0.01
    assert "baseline: the original is not deterministic" in render_verify_text(report)
    assert "baseline: the original is not deterministic" in render_verify_markdown(report)
    for name in ("inplace", "counter", "streams"):
        assert not by[name].baseline  # deterministic originals: nothing to explain
