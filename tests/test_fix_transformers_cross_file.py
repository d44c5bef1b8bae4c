"""GM203 on real code across files: the FutureWarning of transformers 4.52.4's
``ModuleUtilsMixin.get_extended_attention_mask`` (``modeling_utils.py``), reached from
``FlavaTextModel.forward`` (``models/flava/modeling_flava.py``).

The installed package is copied whole into a temporary repository as its source and the model
built tiny from its config (fp32, CPU, eval; ``benchmarks/cross_file_table.py``, which measures
layoutlmv3 and bros too). The real loop runs at the default safety (detect in a worker, every
rule, re-detect, write), then ``verify`` compares the committed tree with the fixed one: outputs
eager and compiled, printed text, log records, warnings in order.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

pytestmark = [pytest.mark.xdist_group("test_fix_transformers"), pytest.mark.slow]


def test_flava_mixin_warning_is_made_in_the_graph_and_the_break_goes(tmp_path):
    from benchmarks.cross_file_table import fix_and_verify, write_repo

    root = write_repo(tmp_path / "repo", ["flava"])
    report, checked = fix_and_verify(root)
    assert not report.errors and not report.failed
    [target] = report.targets
    assert (target.breaks_before, target.breaks_after, target.graphs_after) == (1, 0, 1)
    assert [(f.rule, f.file, f.line) for f in report.applied] == [("GM203", "src/transformers/modeling_utils.py", 1614)]
    text = (root / "src/transformers/modeling_utils.py").read_text()
    assert "'.models.flava.modeling_flava.FlavaTextModel',))(" in text
    assert [t.name for t in checked.targets] == ["flava"] and all(t.ok for t in checked.targets), checked
