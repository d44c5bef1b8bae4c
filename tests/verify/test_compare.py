"""The parent-side comparison helpers, without workers."""

from __future__ import annotations

import dataclasses

import pytest
from collections import OrderedDict

import torch

from graphmend.verify.compare import LineMap, Stats, compare_tensor
from graphmend.verify.worker import flatten


def test_flatten_tuples_dicts_dataclasses_and_model_outputs():
    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        n: int

    class ModelOutputLike(OrderedDict):
        pass

    out = (torch.ones(2), {"a": Out(torch.zeros(1), 3)}, ModelOutputLike(loss=torch.tensor(1.0)), None)
    paths = [p for p, _ in flatten(out)]
    assert paths == ["out[0]", "out[1]['a'].logits", "out[1]['a'].n", "out[2]['loss']", "out[3]"]


def test_tight_and_loose_tolerances():
    stats = Stats()
    x = torch.randn(100)
    assert compare_tensor(x, x.clone(), tight=True, rtol=None, atol=None, stats=stats) is None
    nudged = x + 1e-5
    assert compare_tensor(nudged, x, tight=True, rtol=None, atol=None, stats=stats) is not None  # eager vs eager
    assert compare_tensor(nudged, x, tight=False, rtol=None, atol=None, stats=stats) is None  # compiled: fp32 defaults
    assert compare_tensor(nudged, x, tight=False, rtol=0.0, atol=1e-7, stats=stats) is not None  # configured tighter
    assert "shape" in compare_tensor(x[:3], x[:4], tight=True, rtol=None, atol=None, stats=stats)
    assert "dtype" in compare_tensor(x.double(), x, tight=False, rtol=None, atol=None, stats=stats)
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_tensor(nan, nan.clone(), tight=True, rtol=None, atol=None, stats=Stats()) is None
    assert stats.max_abs > 9e-6


def test_line_map_follows_inserted_and_rewritten_lines(tmp_path):
    before, after = tmp_path / "b", tmp_path / "a"
    before.mkdir(), after.mkdir()
    (before / "m.py").write_text("a\nb\nprint(x)\nc\n")
    (after / "m.py").write_text("import y\na\nb\ny.record(print, x)\nc\n")
    lines = LineMap(before, after)
    assert lines.accepts("m.py", 2, "m.py", 3)  # unchanged, shifted by the insertion
    assert not lines.accepts("m.py", 2, "m.py", 2)
    assert lines.accepts("m.py", 3, "m.py", 4)  # the rewritten line
    assert not lines.accepts("m.py", 3, "m.py", 5)
    assert lines.rel(str(after / "m.py"), after) == "m.py"


def test_capture_sees_prints_non_propagating_loggers_and_warnings():
    import logging
    import warnings

    from graphmend.verify.worker import _capture

    library = logging.getLogger("somelib.module")
    library.propagate = False  # as transformers does at its root logger
    library.addHandler(logging.NullHandler())
    with _capture() as captured:
        print("hello")
        library.warning("value %d", 3)
        warnings.warn("careful", UserWarning)
    assert captured["stdout"] == "hello\n"
    (record,) = captured["logs"]
    assert (record["message"], record["level"], record["funcName"]) == ("value 3", "WARNING", "test_capture_sees_prints_non_propagating_loggers_and_warnings")
    assert record["lineno"] > 0
    (warning,) = captured["warnings"]
    assert (warning["category"], warning["message"]) == ("UserWarning", "careful")
    assert logging.Logger.handle.__name__ == "handle" and logging.Logger.handle.__module__ == "logging"  # unhooked


def test_plain_values_exact_in_eager_close_in_compiled(tmp_path):
    from graphmend.verify.compare import compare_outcomes

    def outcome(value):
        return {"exception": None, "tensors": [], "values": {"out['mean']": value}, "stdout": "", "logs": [], "warnings": []}

    common = dict(actual_tensors={}, expected_tensors={}, actual_root=tmp_path, expected_root=tmp_path,
                  lines=LineMap(tmp_path, tmp_path), rtol=None, atol=None, stats=Stats())
    assert compare_outcomes("c", "eager", outcome(0.5 + 1e-9), outcome(0.5), **common)
    assert not compare_outcomes("c", "compiled", outcome(0.5 + 1e-9), outcome(0.5), **common)
    assert compare_outcomes("c", "compiled", outcome(0.6), outcome(0.5), **common)
    assert compare_outcomes("c", "eager", outcome(1), outcome(True), **common)  # type changes count
    assert not compare_outcomes("c", "eager", outcome("<a.B>"), outcome("<a.B>"), **common)


def test_tensor_files_and_state_hand_over_never_follow_a_worker_s_symlink(tmp_path):
    """A worker that leaves a symlink where its tensors or state belong gets an arm error (a
    ``ValueError``), and the parent never reads the host file behind the link."""
    import torch

    from graphmend.verify.compare import load_tensors
    from graphmend.verify.parent import _feed
    from graphmend.verify.worker import OUTPUTS, STATE_OUT

    secret = tmp_path / "secret.pt"
    torch.save({"leak": torch.ones(1)}, secret)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert load_tensors(scratch / OUTPUTS) == {}  # nothing saved is no tensors, not an error
    (scratch / OUTPUTS).symlink_to(secret)
    with pytest.raises(ValueError):
        load_tensors(scratch / OUTPUTS)
    (scratch / STATE_OUT).symlink_to(secret)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError):
        _feed(scratch, other)
    assert not any(other.iterdir())
    (scratch / OUTPUTS).unlink()
    (scratch / OUTPUTS).write_bytes(b"not a tensor file")
    with pytest.raises(ValueError, match="not a tensor file"):
        load_tensors(scratch / OUTPUTS)
