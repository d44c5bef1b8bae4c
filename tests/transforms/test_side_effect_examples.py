"""The demo repository's deferrable and trap breaks (examples/): fixed, compiled fullgraph, equal.

``examples/src/tinymodels`` has a decoder with a ``warning_once`` and a forgotten ``print`` and
an encoder with a tensor-guarded ``raise``, each next to a data-dependent ``if`` (GM101). After
the rules run (static mode, ``safe``), both models compile with ``fullgraph=True`` and match
the original eager run: values, printed text, the once-only warning, and the exception on the
failing input.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Safety  # noqa: E402
from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import reset_dynamo  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "src" / "tinymodels"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append((record.levelname, record.getMessage()))


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The original package and a fixed copy importable side by side (``tinymodels_fixed``)."""
    tmp = tmp_path_factory.mktemp("examples")
    fixed = tmp / "tinymodels_fixed"
    shutil.copytree(EXAMPLES, fixed)
    # The break lines the targets report (static detection finds the same sites), given to the
    # rules as in dynamic mode: renaming the imports below moves no line.
    from graphmend.config import load_config
    from graphmend.detect.static import detect_static
    from graphmend.transforms.engine import route_breaks
    from graphmend.transforms.registry import all_rules

    breaks = detect_static(load_config(EXAMPLES.parents[1])).breaks
    applied = {}
    for name in ("encoder.py", "decoder.py"):
        path = fixed / name
        text = re.sub(r"\btinymodels\.", "tinymodels_fixed.", path.read_text())
        lines = route_breaks([b for b in breaks if b.file.endswith("/" + name)], all_rules())
        # the repository's root, as `graphmend fix` gives it: the rules read the logger's helper there
        rel = f"tinymodels_fixed/{name}"
        ctx = RuleContext(file=rel, threshold=Safety.SAFE, device="cpu", verified=True, root=str(tmp))
        result = fix_text(rel, text, ctx, lines_by_rule=lines)
        assert not result.failed and not result.error
        applied[name] = sorted(f.rule for f in result.applied)
        path.write_text(result.text)
    for path in fixed.glob("*.py"):
        path.write_text(re.sub(r"\btinymodels\.", "tinymodels_fixed.", path.read_text()))
    assert applied == {"encoder.py": ["GM101", "GM301"], "decoder.py": ["GM101", "GM201", "GM202"]}
    sys.path.insert(0, str(EXAMPLES.parent))
    sys.path.insert(0, str(tmp))
    try:
        from tinymodels import decoder as d0, encoder as e0
        from tinymodels_fixed import decoder as d1, encoder as e1
    finally:
        sys.path.remove(str(EXAMPLES.parent))
        sys.path.remove(str(tmp))
    return (d0, e0), (d1, e1)


def _observe(fn, inputs):
    handler = _Records()
    logging.getLogger().addHandler(handler)
    logging.Logger.warning_once.cache_clear()
    out = io.StringIO()
    results = []
    try:
        with contextlib.redirect_stdout(out):
            for args in inputs:
                try:
                    results.append(fn(*args))
                except Exception as exc:  # the failing path is compared too
                    results.append((type(exc).__name__, str(exc)))
    finally:
        logging.getLogger().removeHandler(handler)
    return results, out.getvalue(), handler.messages


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(y, x)
        else:
            assert y == x


def test_decoder_fullgraph_equal_text_and_values(packages):
    (d0, _), (d1, _) = packages
    torch.manual_seed(0)
    original = d0.Decoder().eval()
    fixed = d1.Decoder().eval()
    fixed.load_state_dict(original.state_dict())
    ids = torch.randint(0, 64, (1, 12))
    pos = torch.arange(12)[None, :]
    inputs = [(ids, pos), (ids.flip(-1), pos)]
    expected = _observe(original, inputs)
    reset_dynamo()
    got = _observe(torch.compile(fixed, backend="eager", fullgraph=True), inputs)
    _same(expected[0], got[0])
    assert got[1] == expected[1] == "decoder hidden torch.Size([1, 12, 16])\n" * 2
    assert got[2] == expected[2] and len(expected[2]) == 1  # warning_once: once


def test_encoder_fp16_fullgraph_equal_including_the_failing_input(packages):
    (_, e0), (_, e1) = packages
    torch.manual_seed(0)
    original = e0.Encoder().to(torch.float16).eval()
    fixed = e1.Encoder().to(torch.float16).eval()
    fixed.load_state_dict(original.state_dict())
    ids = torch.randint(0, 64, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    bad = mask.clone()
    bad[1] = 0
    inputs = [(ids, mask), (ids, bad), (ids.flip(-1), mask)]
    expected = _observe(original, inputs)
    assert expected[0][1] == ("ValueError", "every sequence needs at least one unmasked token")
    reset_dynamo()
    got = _observe(torch.compile(fixed, backend="eager", fullgraph=True), inputs)
    _same(expected[0], got[0])
