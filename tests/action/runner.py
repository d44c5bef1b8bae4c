"""Run a composite action's steps the way the GitHub runner does, for the tests.

For each step of ``action.yml``: the ``${{ }}`` expressions of its ``env:`` are evaluated
(``inputs.*`` with action.yml's defaults, ``github.*``, ``runner.*``, ``steps.<id>.outputs.*``),
the ``run:`` script is written to a file and run with the runner's bash template
(``bash --noprofile --norc -eo pipefail FILE``), each step gets fresh ``$GITHUB_OUTPUT`` and
``$GITHUB_STEP_SUMMARY`` files, and the action's outputs are evaluated at the end. Like the
runner, a failing step stops the action; the outputs written before are kept.

Only the expression forms action.yml uses are supported (dotted names); anything else raises,
so the harness cannot silently run an action differently from the runner.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from action.workflow import read_outputs

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")


@dataclass
class StepResult:
    id: str
    code: int
    outputs: dict[str, str]
    summary: str
    log: str


@dataclass
class ActionResult:
    steps: list[StepResult] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def code(self) -> int:
        return next((s.code for s in self.steps if s.code != 0), 0)

    @property
    def log(self) -> str:
        return "".join(s.log for s in self.steps)

    @property
    def summary(self) -> str:
        return "".join(s.summary for s in self.steps)


TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||==|!=|'(?:[^']|'')*'|[A-Za-z_][A-Za-z0-9_.-]*)")


def _lookup(expr: str, ctx: dict[str, Any]) -> str:
    if not NAME.match(expr):
        raise ValueError(f"expression not supported by the test runner: {expr}")
    node: Any = ctx
    for part in expr.split("."):
        if not isinstance(node, dict) or part not in node:
            if expr.startswith("steps."):
                return ""  # a step that did not run (an earlier one failed) has no outputs
            raise KeyError(f"unknown context value: {expr}")
        node = node[part]
    return "" if node is None else str(node)


def _expression(expr: str, ctx: dict[str, Any]) -> str:
    """GitHub's expression subset action.yml uses: names, 'strings', ==, != (case-insensitive,
    as GitHub compares strings), && and || (returning an operand, falsy = ''), parentheses."""
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or not m.group(1):
            raise ValueError(f"expression not supported by the test runner: {expr}")
        tokens.append(m.group(1))
        pos = m.end()
        while pos < len(expr) and expr[pos].isspace():
            pos += 1
    at = 0

    def peek() -> Optional[str]:
        return tokens[at] if at < len(tokens) else None

    def take() -> str:
        nonlocal at
        at += 1
        return tokens[at - 1]

    def primary() -> str:
        tok = take()
        if tok == "(":
            value = disjunction()
            if take() != ")":
                raise ValueError(f"unbalanced parentheses: {expr}")
            return value
        if tok.startswith("'"):
            return tok[1:-1].replace("''", "'")
        return _lookup(tok, ctx)

    def comparison() -> str:
        left = primary()
        while peek() in ("==", "!="):
            op, right = take(), primary()
            equal = left.lower() == right.lower()
            left = "true" if equal == (op == "==") else ""
        return left

    def conjunction() -> str:
        left = comparison()
        while peek() == "&&":
            take()
            right = comparison()
            left = right if left else left
        return left

    def disjunction() -> str:
        left = conjunction()
        while peek() == "||":
            take()
            right = conjunction()
            left = left if left else right
        return left

    value = disjunction()
    if at != len(tokens):
        raise ValueError(f"expression not supported by the test runner: {expr}")
    return value


def evaluate(text: str, ctx: dict[str, Any]) -> str:
    return EXPR.sub(lambda m: _expression(m.group(1), ctx), text)


def run_action(action_dir: Path, *, inputs: dict[str, str], event_name: str, event: dict[str, Any],
               workspace: Path, temp: Path, token: str = "", env: Optional[dict[str, str]] = None,
               timeout: int = 600) -> ActionResult:
    spec = yaml.safe_load((action_dir / "action.yml").read_text())
    assert spec["runs"]["using"] == "composite"
    unknown = set(inputs) - set(spec["inputs"])
    if unknown:
        raise KeyError(f"inputs not declared in action.yml: {sorted(unknown)}")
    temp.mkdir(parents=True, exist_ok=True)
    event_path = temp / "event.json"
    event_path.write_text(json.dumps(event))
    ctx: dict[str, Any] = {
        "github": {"action_path": str(action_dir), "token": token, "workspace": str(workspace),
                   "event_name": event_name},
        "runner": {"temp": str(temp), "os": "Linux"},
        "steps": {},
    }
    ctx["inputs"] = {name: evaluate(str(inputs.get(name, decl.get("default", ""))), ctx)
                     for name, decl in spec["inputs"].items()}
    base_env = {
        **(env or {}),
        "GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_ACTION_PATH": str(action_dir), "RUNNER_TEMP": str(temp),
    }
    result = ActionResult()
    for n, step in enumerate(spec["runs"]["steps"]):
        assert step.get("shell") == "bash", "every run step declares shell: bash"
        sid = step.get("id", f"__step{n}")
        out_file, summary_file = temp / f"output-{n}", temp / f"summary-{n}"
        out_file.write_text("")
        summary_file.write_text("")
        step_env = {k: evaluate(str(v), ctx) for k, v in (step.get("env") or {}).items()}
        script = temp / f"step-{n}.sh"
        script.write_text(evaluate(step["run"], ctx))
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=workspace, env={**base_env, **step_env, "GITHUB_OUTPUT": str(out_file),
                                                  "GITHUB_STEP_SUMMARY": str(summary_file)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        outputs = read_outputs(out_file)
        ctx["steps"][sid] = {"outputs": outputs}
        result.steps.append(StepResult(sid, proc.returncode, outputs, summary_file.read_text(), proc.stdout))
        if proc.returncode != 0:
            break
    result.outputs = {name: evaluate(str(decl["value"]), ctx) for name, decl in spec["outputs"].items()}
    return result
