"""GM2xx on a real transformers 4.52 model: t5's ``warning_once`` break, fixed and verified.

transformers' own ``modeling_t5.py`` is copied into a temporary git repository as that
repository's source (relative imports made absolute) with a targets module that builds the model
tiny from a config. The real pipeline runs: the fix loop (``graphmend fix``: dynamic detection in
a worker, the rules on the break lines at ``fix.safety: safe``, re-detection, write), then
``verify`` (the committed tree against the fixed one: outputs eager and compiled, printed text,
log records, warnings).
The full table over seven models (fp32 and fp16) is ``benchmarks/side_effects_table.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("side_effects_table", REPO / "benchmarks" / "side_effects_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_t5_warning_once_break_removed_outputs_equal(tmp_path):
    bench = _bench()
    root = bench.write_repo(tmp_path / "t5-float32", "t5")
    source = root / "hfcopy" / "modeling_t5.py"
    original = source.read_text()
    row = bench.fix_and_verify(root)
    assert row.deferrable_before >= 1, "the tuple-past_key_values warning_once breaks t5 in eval mode"
    assert row.fixes == "GM202x1"
    assert row.breaks_after == 0 and row.deferrable_after == 0
    assert row.graphs_before > row.graphs_after == 1
    assert row.equivalent, row.detail
    # Only the callee of the warning_once call changed, and the runtime was appended: every
    # original line keeps its number (log and warning locations elsewhere do not move).
    fixed = source.read_text().splitlines()
    before = original.splitlines()
    changed = [i + 1 for i, (a, b) in enumerate(zip(before, fixed)) if a != b]
    assert len(changed) == 1 and "_graphmend_deferred(logger.warning_once, \"call\")(" in fixed[changed[0] - 1]
    assert fixed[len(before):][2].startswith("# ---") and "_graphmend_install_boundaries(globals())" in fixed[-1]
