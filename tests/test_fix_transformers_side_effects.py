"""GM2xx on real transformers 4.52 models (t5, bart, whisper, biogpt): breaks fixed and verified.

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


RUNTIME_MODELS = ("t5", "bart", "whisper", "biogpt")


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNTIME_MODELS)
def test_fix_adds_at_most_five_lines_and_one_runtime_module(tmp_path, name):
    """Issue 15's measure: the modeling file grows by the changed call sites plus at most 5 lines,
    the package gets one stamped runtime module, and the fix still verifies (one graph, outputs,
    printed text, log records and warnings equal)."""
    from graphmend.transforms._runtime_copy import FILE_NAME, is_ours

    bench = _bench()
    root = bench.write_repo(tmp_path / f"{name}-float32", name)
    source = root / "hfcopy" / f"{bench.MODELS[name][1]}.py"
    original = source.read_text().splitlines()
    row = bench.fix_and_verify(root)
    assert row.deferrable_before >= 1 and row.fixes.startswith("GM2")
    assert row.breaks_after == 0 and row.deferrable_after == 0
    assert row.graphs_before > row.graphs_after == 1
    assert row.equivalent, row.detail
    fixed = source.read_text().splitlines()
    changed = [b for a, b in zip(original, fixed) if a != b]
    assert changed and all("_graphmend_deferred(" in line or "_graphmend_trap(" in line for line in changed)
    added = fixed[len(original):]
    assert len(added) <= 5, added
    assert "from ._graphmend_runtime import _graphmend_install  # noqa: E402" in added
    runtime = root / "hfcopy" / FILE_NAME
    assert is_ours(runtime.read_text())
    assert sorted(p.name for p in (root / "hfcopy").iterdir() if p.suffix == ".py") == sorted(
        ["__init__.py", FILE_NAME, source.name])
    if name == "t5":
        # Only the callee of the tuple-past_key_values warning_once call changed (t5 in eval mode),
        # and every original line keeps its number (log and warning locations do not move).
        assert row.fixes == "GM202x1" and len(changed) == 1
        assert '_graphmend_deferred(logger.warning_once, "call")(' in changed[0]
        assert added == ["", "", "from ._graphmend_runtime import _graphmend_install  # noqa: E402",
                         "_graphmend_install(globals())"]
