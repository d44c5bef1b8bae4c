"""action.yml, action/settings.py, the README and docs/action.md agree on the inputs and outputs:
names, defaults, allowed values, how each input reaches the code, and where each output comes from."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from action import settings

REPO = Path(__file__).resolve().parents[2]


def action_yml() -> dict:
    return yaml.safe_load((REPO / "action.yml").read_text())


def section(text: str, start: str = "<!-- action:start -->", end: str = "<!-- action:end -->") -> str:
    return text[text.index(start) + len(start): text.index(end)]


def table_rows(markdown: str, header: str) -> dict[str, list[str]]:
    """Rows of the markdown table whose first header cell is ``header``, keyed by the first cell."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_action_yml_inputs_are_the_settings_inputs_with_the_same_defaults():
    spec = action_yml()["inputs"]
    assert list(spec) == [i.name for i in settings.INPUTS]
    for i in settings.INPUTS:
        assert str(spec[i.name].get("default", "")) == i.default, i.name
        assert spec[i.name].get("required", False) is False, i.name
        for choice in i.choices:  # the description lists every value settings accepts
            assert choice in spec[i.name]["description"], (i.name, choice)


def test_every_input_reaches_settings_through_env_and_nothing_else():
    steps = {s["id"]: s for s in action_yml()["runs"]["steps"]}
    env = steps["run"]["env"]
    passed = {k: v for k, v in env.items() if k.startswith("INPUT_")}
    token = passed.pop("INPUT_GITHUB_TOKEN")
    assert passed == {i.env: f"${{{{ inputs.{i.name} }}}}" for i in settings.INPUTS if i.name != "github-token"}
    assert "inputs.github-token" in token  # conditionally: see test_the_token_reaches_post_and_scan_only
    # No script reads an input directly (that is how expression injection happens).
    for step in steps.values():
        assert "inputs." not in step["run"], step["id"]


def test_action_yml_outputs_are_the_settings_outputs_from_the_run_step():
    spec = action_yml()["outputs"]
    assert list(spec) == list(settings.OUTPUTS)
    for name, text in settings.OUTPUTS.items():
        assert spec[name]["value"] == f"${{{{ steps.run.outputs.{name} }}}}"
        assert spec[name]["description"].rstrip(".").replace("`", "")[:40] == text.rstrip(".").replace("`", "")[:40]


def test_only_settings_reads_input_and_github_variables():
    for path in (REPO / "action").glob("*.py"):
        if path.name == "settings.py":
            continue
        text = path.read_text()
        assert not re.search(r"environ(\.get)?\(?\[?[\"'](INPUT_|GITHUB_)", text), path.name
        assert "getenv(" not in text, path.name


def test_readme_and_docs_tables_match_settings():
    for doc in (section((REPO / "README.md").read_text()), (REPO / "docs" / "action.md").read_text()):
        inputs = table_rows(doc, "input")
        assert list(inputs) == [i.name for i in settings.INPUTS]
        for i in settings.INPUTS:
            shown = inputs[i.name][0]
            assert shown == (f"`{i.default}`" if i.default else "(graphmend.yml)"), i.name
        outputs = table_rows(doc, "output")
        assert list(outputs) == list(settings.OUTPUTS)
        assert settings.markdown_tables() in doc  # generated text, not a drifting copy


def test_readme_section_says_what_the_issue_requires():
    text = section((REPO / "README.md").read_text())
    for needle in ("pull_request_target", "ephemeral", "approval", "NVIDIA Container Toolkit", "CUDA build of torch",
                   "head.sha", "docs/action.md", "examples/workflows/"):
        assert needle in text, needle
