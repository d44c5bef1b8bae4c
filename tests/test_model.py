"""The shared values: JSON round trip, fingerprints that survive unrelated edits, safety ordering."""

import json

from graphmend.model import (
    Category, CheckReport, Edit, Environment, FileError, Fix, Frame, GraphBreak, Lever, Safety, TargetResult,
    fingerprint, from_dict, to_dict,
)


def sample_report() -> CheckReport:
    brk = GraphBreak(
        file="src/m.py", line=12, col=8, reason="Data-dependent branching", category=Category.DATA_DEPENDENT_BRANCH,
        gb_id="GB0170", fixable=True, rule="GM101", lever=Lever.RULE, fingerprint="abc", hits=3, verified=True,
        stack=(Frame("src/m.py", 12, "forward"), Frame("/site/x.py", 3, "f", inside_repo=False)),
    )
    target = TargetResult(name="t", graph_count=2, break_count=1, breaks=(brk,), environment=Environment(torch_version="2.13.0"))
    return CheckReport(targets=(target,), static=(), errors=(FileError("src/bad.py", "syntax error at line 3"),))


def test_json_round_trip_is_exact():
    report = sample_report()
    data = json.loads(json.dumps(to_dict(report)))
    assert data["targets"][0]["breaks"][0]["category"] == "data-dependent-branch"
    assert data["targets"][0]["breaks"][0]["stack"][1]["inside_repo"] is False
    assert from_dict(CheckReport, data) == report


def test_fix_round_trip_and_single_range():
    fix = Fix(rule="GM101", title="t", safety=Safety.SAFE, edits=(Edit("a.py", 3, 4, "x\n", "y\nz\n"),), file="a.py", line=3)
    assert from_dict(Fix, json.loads(json.dumps(to_dict(fix)))) == fix
    assert fix.is_single_range
    two = Fix(rule="GM201", title="t", safety=Safety.UNSAFE, edits=fix.edits * 2, file="a.py", line=3)
    assert not two.is_single_range


def test_failed_report_when_a_target_or_file_errors():
    assert sample_report().failed
    assert not CheckReport(targets=(TargetResult(name="t"),)).failed
    assert CheckReport(targets=(TargetResult(name="t", error="boom"),)).failed


def test_fingerprint_ignores_line_numbers_and_whitespace_but_not_content():
    a = fingerprint("src/m.py", "Enc.forward", "GB0170", "if  torch.isinf(h).any():")
    assert a == fingerprint("src/m.py", "Enc.forward", "GB0170", "    if torch.isinf(h).any():")
    assert a != fingerprint("src/m.py", "Enc.forward", "GB0170", "if torch.isnan(h).any():")
    assert a != fingerprint("src/m.py", "Dec.forward", "GB0170", "if torch.isinf(h).any():")
    assert a != fingerprint("src/m.py", "Enc.forward", "GB0170", "if torch.isinf(h).any():", occurrence=1)


def test_safety_thresholds():
    assert Safety.SAFE.allowed_by(Safety.SAFE)
    assert not Safety.UNSAFE.allowed_by(Safety.SAFE)
    assert Safety.UNSAFE.allowed_by(Safety.UNSAFE)
    assert not Safety.DISPLAY_ONLY.allowed_by(Safety.UNSAFE)
