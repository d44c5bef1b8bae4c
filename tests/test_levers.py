"""The lever on every break, end to end: real Dynamo breaks -> the classification table -> the
rule the engine routes them to -> every report format names the lever (rule, config, or none
with the reason)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch

from graphmend.detect import classify as cls
from graphmend.detect.dynamic import _Recorder, _statement_at
from graphmend.model import Category, CheckReport, Environment, GraphBreak, Lever, TargetResult
from graphmend.report import lever_note, render_check
from graphmend.transforms.engine import route_breaks
from graphmend.transforms.registry import all_rules

MODULE = textwrap.dedent('''\
    import torch


    def f(x, t, m):
        n = t.item()
        y = x[:n]
        idx = torch.nonzero(m)
        z = y * 2 if y.sum() > 0 else y - 1
        torch._dynamo.graph_break()
        return z, idx
''')


@pytest.fixture(scope="module")
def breaks(tmp_path_factory) -> list[GraphBreak]:
    """Run f under Dynamo and classify each break the way dynamic detection does."""
    root = tmp_path_factory.mktemp("levers")
    path = root / "lever_mod.py"
    path.write_text(MODULE)
    sys.path.insert(0, str(root))
    try:
        import lever_mod  # noqa: PLC0415 - written above
    finally:
        sys.path.remove(str(root))
    torch._dynamo.reset()
    recorder = _Recorder()
    with recorder.installed():
        torch.compile(lever_mod.f, backend=recorder.backend(None))(torch.randn(6), torch.tensor(3), torch.tensor([0, 1, 1]))
    out = []
    for event in recorder.events:
        file, line = next((f, ln) for f, ln, _, _ in reversed(event.stack) if f == str(path))
        c = cls.classify(event.gb_type, event.message, statement=_statement_at(file, line))
        out.append(GraphBreak(file="lever_mod.py", line=line, reason=event.gb_type, category=c.category,
                              gb_type=event.gb_type, fixable=c.fixable, rule=c.rule, lever=c.lever,
                              lever_reason=c.lever_reason, verified=True))
    return out


def by_line(breaks, line):
    found = [b for b in breaks if b.line == line]
    assert found, [(b.line, b.gb_type) for b in breaks]
    return found[0]


def test_each_real_break_has_its_lever(breaks):
    item = by_line(breaks, 5)
    assert (item.category, item.lever) == (Category.SCALAR, Lever.CONFIG)
    assert "capture_scalar_outputs" in item.lever_reason
    nonzero = by_line(breaks, 7)
    assert (nonzero.category, nonzero.lever) == (Category.DYNAMIC_SHAPE, Lever.CONFIG)
    assert "capture_dynamic_output_shape_ops" in nonzero.lever_reason
    ifexp = by_line(breaks, 8)
    assert (ifexp.rule, ifexp.lever, ifexp.fixable) == ("GM402", Lever.RULE, True)
    explicit = by_line(breaks, 9)
    assert explicit.lever is Lever.NONE and explicit.lever_reason and explicit.rule is None


def test_engine_routes_each_break_to_the_rule_that_removes_it(breaks):
    routed = route_breaks(breaks, all_rules())
    assert routed["GM402"] == {8} and 8 not in routed["GM101"]
    assert {5} <= routed["GM401"] and {5} <= routed["GM501"]  # GM401 first where exact, GM501 otherwise
    assert routed["GM502"] == {7}
    assert not any(9 in lines for lines in routed.values())


def test_every_report_format_names_the_lever(breaks):
    env = Environment(torch_version=torch.__version__, device="cpu", dtype="float32", backend="eager", mode="eval")
    report = CheckReport(targets=(TargetResult(name="t", graph_count=5, break_count=len(breaks), breaks=tuple(breaks), environment=env),))
    text = render_check(report, "text")
    github = render_check(report, "github")
    sarif = json.loads(render_check(report, "sarif"))
    for rendered in (text, github):
        assert "[config: torch._dynamo.config.capture_scalar_outputs = True (GM501)]" in rendered
        assert "[config: torch._dynamo.config.capture_dynamic_output_shape_ops = True (GM502)]" in rendered
        assert "[fixable (GM402)]" in rendered
        assert "[not fixable: " in rendered
    results = sarif["runs"][0]["results"]
    levers = sorted((r["properties"]["lever"], bool(r["properties"]["leverReason"])) for r in results)
    assert ("config", True) in levers and ("rule", True) in levers and ("none", True) in levers
    messages = " ".join(r["message"]["text"] for r in results)
    assert "(GM501)" in messages and "(GM502)" in messages and "[fixable (GM402)]" in messages


def test_lever_note_is_empty_only_without_any_reason():
    plain = GraphBreak(file="a.py", line=1, reason="r", category=Category.OTHER)
    assert lever_note(plain) == ""
    assert lever_note(GraphBreak(file="a.py", line=1, reason="r", category=Category.OTHER, lever_reason="why")) == " [not fixable: why]"


def test_review_findings_carry_the_lever_of_unfixable_breaks():
    from graphmend.report import lever_text

    item = GraphBreak(file="a.py", line=3, reason="r", category=Category.SCALAR, lever=Lever.CONFIG,
                      lever_reason="torch._dynamo.config.capture_scalar_outputs = True")
    assert lever_text(item) == "config: torch._dynamo.config.capture_scalar_outputs = True (GM501)"
    call = GraphBreak(file="a.py", line=3, reason="r", category=Category.UNSUPPORTED_CALL, lever=Lever.NONE,
                      lever_reason="Dynamo cannot trace this call")
    assert lever_text(call) == "not fixable: Dynamo cannot trace this call"
    assert lever_text(GraphBreak(file="a.py", line=3, reason="r", category=Category.OTHER)) == ""


def test_the_example_router_compiles_to_one_graph_with_both_levers():
    """examples/ tiny-moe: GM401 rewrites the `.item()`, GM502's setting is put around every call
    (its compile site is the harness): no break, one graph, no recompilation, the same outputs."""
    from graphmend.model import Safety
    from graphmend.transforms.base import RuleContext
    from graphmend.transforms.engine import fix_text
    from graphmend.transforms.registry import get_rule
    from tests.conftest import EXAMPLES

    text = (EXAMPLES / "src" / "tinymodels" / "moe.py").read_text()
    item_line = next(i for i, line in enumerate(text.splitlines(), 1) if "temperature.clamp(" in line and ".item()" in line)
    route_line = next(i for i, line in enumerate(text.splitlines(), 1) if "torch.nonzero(chosen" in line)
    ctx = RuleContext(threshold=Safety.SAFE, verified=True)
    result = fix_text("moe.py", text, ctx, [get_rule("GM401"), get_rule("GM502")], {"GM401": [item_line], "GM502": [route_line]})
    assert [f.rule for f in result.applied] == ["GM401"]
    [shown] = [s.fix for s in result.skipped]
    assert shown.rule == "GM502" and "capture_dynamic_output_shape_ops=True" in shown.notes

    def build(source: str):
        namespace: dict = {"__name__": "moe_under_test"}
        exec(compile(source, "moe_under_test.py", "exec"), namespace)  # noqa: S102 - the example's code
        return namespace["tiny_moe"]()

    model, args = build(text)
    fixed_model, _ = build(result.text)
    other = (torch.randn(6, 16), torch.tensor(1.3))
    torch._dynamo.reset()
    recorder = _Recorder()
    compiled = torch.compile(fixed_model, backend=recorder.backend(None))
    with recorder.installed(), torch.no_grad():
        outs = []
        for call_args in (args, other):
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                outs.append(compiled(*call_args))
        expected = [model(*a) for a in (args, other)]
    assert recorder.events == [] and recorder.graphs == 1  # no break, no recompilation
    assert all(torch.allclose(o, e, rtol=0, atol=1e-6) for o, e in zip(outs, expected))


def test_a_target_proves_a_proposed_setting_through_detection(tmp_path, monkeypatch):
    """`dynamo_config` on a target puts the setting around every call in the detection worker
    (the harness is the compile site): the example router's nonzero break is gone, the
    `.item()` break (a different setting) stays."""
    from graphmend.config import load_config
    from graphmend.detect.dynamic import detect_task
    from graphmend.model import to_dict
    from tests.conftest import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    target = to_dict(load_config(EXAMPLES).target("tiny-moe"))
    plain = detect_task({"target": target, "backend": "eager"}, tmp_path)
    with_setting = detect_task({"target": dict(target, dynamo_config=["capture_dynamic_output_shape_ops"]),
                                "backend": "eager"}, tmp_path)
    assert "Dynamic shape operator" in {s["gb_type"] for s in plain["sites"]}
    assert {s["gb_type"] for s in with_setting["sites"]} == {"Unsupported Tensor.item() call with capture_scalar_outputs=False"}
    assert with_setting["graph_count"] < plain["graph_count"]
    assert torch._dynamo.config.capture_dynamic_output_shape_ops is False  # scoped to the calls


def test_dynamo_config_is_validated(tmp_path):
    from graphmend.config import ConfigError, load_config

    (tmp_path / "graphmend.yml").write_text(
        "targets:\n  - {name: t, entry: 'm:f', dynamo_config: [capture_scalar_outputs]}\n")
    assert load_config(tmp_path).targets[0].dynamo_config == ("capture_scalar_outputs",)
    (tmp_path / "graphmend.yml").write_text("targets:\n  - {name: t, entry: 'm:f', dynamo_config: [suppress_errors]}\n")
    with pytest.raises(ConfigError, match="targets\\[0\\].dynamo_config"):
        load_config(tmp_path)
