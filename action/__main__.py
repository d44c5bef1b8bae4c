"""``python -m action``: the GitHub Action's entrypoint (``action.yml`` runs it).

It reads the settings (``action/settings.py``, the only reader of ``INPUT_*``/``GITHUB_*``),
picks the verb from the mode (``pr`` on pull_request, ``post`` on workflow_run, ``scan`` on a
schedule), runs ``python -m graphmend <verb>`` in a child process inside a ``::group::``,
then turns the result into step outputs (``$GITHUB_OUTPUT``), a step summary kept under 1 MiB,
and annotations. The exit code is the verb's: for ``pr`` and ``post`` that is the merge gate.

Inputs that override graphmend.yml are applied by writing a merged copy of the file into
``$RUNNER_TEMP`` and passing it with ``--config`` (every verb understands that flag); ``post``
reads its settings from review.json instead, so it gets ``--fail-on`` and a copy of review.json
with ``comment``/``suggestions`` applied. ``pr`` reads the gate's settings from the base branch.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from action import settings as settings_mod
from action import workflow

TITLE = "GraphMend"


def merged_config(s: settings_mod.Settings) -> Optional[Path]:
    """The ``--config`` to pass: graphmend.yml with the inputs' overrides applied, written to the
    runner's temp dir; or, when no input overrides the file, the ``config`` input as given
    (relative to the repository) or ``None`` (the verb finds the file itself).
    """
    overrides = s.overrides()
    if s.mode in ("post", "merge"):
        return None  # post takes its settings from review.json; fail-on is a flag
    if s.mode == "pr":
        # pr takes the gate, fix safety and review settings from the base branch (a pull request
        # cannot loosen its own review); only where its code runs is the inputs' to say.
        overrides = {k: v for k, v in overrides.items() if k == "sandbox"}
    if not overrides:
        # As a name relative to the root: pr looks the same name up on the base branch.
        return Path(os.path.relpath(s.config, s.workspace)) if s.config else None
    import yaml
    from graphmend.config import find_config

    # For pr the checkout's graphmend.yml is the pull request's own: its sandbox section (memory,
    # timeout, image) would loosen the sandbox it is run in. The copy holds the inputs alone, and
    # pr takes every other sandbox setting from the base branch.
    source = None if s.mode == "pr" else Path(s.config) if s.config else find_config(s.workspace)
    data: dict[str, Any] = {}
    if source is not None:
        loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise settings_mod.SettingsError(f"input 'config': {source} does not hold a mapping")
        data = loaded or {}
    for section, values in overrides.items():
        current = data.get(section)
        data[section] = {**(current if isinstance(current, dict) else {}), **values}
    s.temp_dir.mkdir(parents=True, exist_ok=True)
    out = s.temp_dir / "graphmend-action.yml"
    out.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    return out


def verb_command(s: settings_mod.Settings, config: Optional[Path], summary: Path) -> list[str]:
    """The ``graphmend`` command line for the settings' mode.

    ``pr`` reads the gate's settings and baseline from the *base* branch by config name, so the
    name goes through unchanged when no input overrides the file; ``post`` reads the base branch's
    settings through the API; ``fail-on``, ``comment``, ``suggestions`` and ``safety`` are passed as flags; ``scan`` writes SARIF and opens or
    updates the fix pull request, unless ``suggestions`` is ``false`` (then it proposes no fixes).
    """
    # -I keeps the workspace off sys.path: a folder named graphmend/ there must not replace ours.
    gm = [sys.executable, "-I", "-m", "graphmend"]
    common = ["-C", str(s.workspace)]
    if config is not None:
        common += ["--config", str(config)]
    if s.mode == "pr":
        cmd = gm + ["pr", *common, "--format", "json", "--output", s.review_file, "--summary", str(summary)]
        cmd += ["--allow-unsandboxed"] if s.allow_unsandboxed else []
        cmd += ["--cache-dir", s.cache_dir] if s.cache_dir else []
        cmd += ["--shard", s.shard] if s.shard else []
        return cmd + (["--bench"] if s.benchmark else [])
    if s.mode == "merge":
        return gm + ["merge", s.partials, "--format", "json", "--output", s.review_file, "--summary", str(summary)]
    if s.mode == "post":
        cmd = gm + ["post", s.review_file, "-C", str(s.workspace), "--format", "json", "--summary", str(summary)]
        cmd += ["--fail-on", s.fail_on] if s.fail_on else []
        # The trusted inputs go on the command line: post lets review.json only make them quieter.
        cmd += ["--comment", s.comment] if s.comment else []
        cmd += ["--suggestions", "true" if s.suggestions else "false"] if s.suggestions is not None else []
        cmd += ["--safety", s.safety] if s.safety else []
        return cmd + (["--api-url", s.api_url] if s.api_url else [])
    cmd = gm + ["scan", *common, "--format", "json", "--sarif", s.sarif_file, "--summary", str(summary)]
    cmd += ["--bench"] if s.benchmark else []
    if s.suggestions is False:
        return cmd + ["--no-fix"]
    if s.github_token and s.repository:
        cmd += ["--pull-request", "--repo", s.repository]
        cmd += ["--api-url", s.api_url] if s.api_url else []
    return cmd


def child_env(s: settings_mod.Settings) -> dict[str, str]:
    env = dict(os.environ)
    # The verbs read the token from GITHUB_TOKEN; pr must never see one (it runs PR code).
    env.pop("GITHUB_TOKEN", None)
    if s.mode == "pr":
        # Nor any other secret the runner puts in every step's environment (ACTIONS_RUNTIME_TOKEN,
        # ACTIONS_ID_TOKEN_REQUEST_TOKEN, cloud credentials): the analysis needs none of them.
        from graphmend.runner import SECRET_RE

        env = {k: v for k, v in env.items() if not SECRET_RE.search(k) or (k.startswith("GITHUB_") and k != "GITHUB_TOKEN")}
    if s.mode != "pr" and s.github_token:
        env["GITHUB_TOKEN"] = s.github_token
    for name in list(env):
        if name.startswith("INPUT_"):
            del env[name]  # the inputs reach graphmend only as flags and the merged config
    return env


def run_verb(cmd: list[str], env: dict[str, str], cwd: Path, echo: bool = True) -> tuple[int, str]:
    """Run the verb; its stderr streams to the log, its stdout (JSON) is kept (and echoed)."""
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True)
    if proc.stdout and echo:
        sys.stdout.write(proc.stdout if proc.stdout.endswith("\n") else proc.stdout + "\n")
        sys.stdout.flush()
    return proc.returncode, proc.stdout


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _fmt_speedup(values: list[float]) -> str:
    good = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return f"{max(good):.2f}" if good else ""


def review_outputs(path: Path, fail_on: Optional[str]) -> tuple[dict[str, str], list[Any], bool]:
    """Outputs, the new findings and the gate (passed?) from a review.json (validated: it may
    come from a pull request's job, so it is untrusted)."""
    from bot import review as review_mod
    from bot.gate import compute_verdict, is_new

    review = review_mod.load(path)
    verdict = compute_verdict(review, fail_on)
    suggest = review.settings.suggestions
    suggestions = sum(
        1 for f in review.findings
        if suggest and f.status == "introduced" and f.fix is not None and f.fix.is_single_range
        and f.fix.verification is not None and f.fix.verification.status == "passed")
    speedups = [t.benchmark.speedup for t in review.targets if t.benchmark and t.benchmark.speedup]
    speedups += [f.fix.benchmark.speedup for f in review.findings
                 if f.fix and f.fix.benchmark and f.fix.benchmark.speedup]
    outputs = {"new-breaks": str(verdict.new), "fixed-breaks": str(verdict.fixed),
               "suggestions": str(suggestions), "review-url": "", "speedup": _fmt_speedup(speedups)}
    return outputs, [f for f in review.findings if is_new(f)], verdict.passed


def review_url(s: settings_mod.Settings, result: dict[str, Any]) -> str:
    if result.get("review_url"):
        return str(result["review_url"])
    review_id = result.get("review_id")
    number = result.get("pr") or result.get("number") or (s.event.get("pull_request") or {}).get("number")
    if not number:
        pulls = (s.event.get("workflow_run") or {}).get("pull_requests") or []
        number = pulls[0].get("number") if pulls and isinstance(pulls[0], dict) else None
    repo = s.repository or (s.event.get("repository") or {}).get("full_name", "")
    if not (review_id and number and repo):
        return ""
    return f"{s.server_url}/{repo}/pull/{number}#pullrequestreview-{review_id}"


def scan_outputs(s: settings_mod.Settings, result: dict[str, Any]) -> dict[str, str]:
    """Outputs from ``graphmend scan --format json``."""
    pull = result.get("pull_request") or {}
    number = pull.get("number") if isinstance(pull, dict) else None
    url = f"{s.server_url}/{s.repository}/pull/{number}" if number and s.repository else ""
    return {"new-breaks": str(result.get("breaks", "")), "fixed-breaks": "",
            "suggestions": str(result.get("verified_fixes", "")), "review-url": url, "speedup": ""}


def annotate(findings: list[Any]) -> None:
    """One warning per new break, on its line (the first few; the runner shows ten per step)."""
    for f in sorted(findings, key=lambda f: (f.file, f.line, f.rule or ""))[: workflow.MAX_ANNOTATIONS]:
        title = f"{TITLE} {f.rule or f.gb_id or 'graph break'}"
        workflow.command("warning", f.reason, file=f.file, line=f.line, title=title)
    if len(findings) > workflow.MAX_ANNOTATIONS:
        workflow.command("notice", f"{len(findings) - workflow.MAX_ANNOTATIONS} more new graph breaks: "
                                   "see review.json and the step summary", title=TITLE)


def annotate_sarif(path: Path) -> None:
    """Warnings for the first SARIF results of a scan (the runner shows ten per step)."""
    try:
        sarif = json.loads(path.read_text(encoding="utf-8"))
        results = [r for run in sarif.get("runs") or [] for r in run.get("results") or []]
    except (OSError, ValueError, AttributeError):
        return
    for r in results[: workflow.MAX_ANNOTATIONS]:
        loc = ((r.get("locations") or [{}])[0].get("physicalLocation") or {})
        workflow.command("warning", str((r.get("message") or {}).get("text", "")),
                         file=(loc.get("artifactLocation") or {}).get("uri", ""),
                         line=(loc.get("region") or {}).get("startLine", ""), title=f"{TITLE} {r.get('ruleId', '')}")


def main(env: Optional[dict[str, str]] = None) -> int:
    try:
        s = settings_mod.load(env)
    except settings_mod.SettingsError as exc:
        workflow.command("error", str(exc), title=f"{TITLE} bad input")
        return 2
    with workflow.group(f"{TITLE}: settings"):
        print(f"mode={s.mode} event={s.event_name or '(none)'} workspace={s.workspace}")
        for name, value in sorted(s.overrides().items()):
            print(f"override {name}: {value}")
    try:
        config = merged_config(s)
    except settings_mod.SettingsError as exc:
        workflow.command("error", str(exc), title=f"{TITLE} bad input")
        return 2
    except (OSError, ValueError) as exc:  # unreadable file or invalid YAML
        workflow.command("error", f"input 'config': {exc}", title=f"{TITLE} bad input")
        return 2
    summary = s.temp_dir / f"graphmend-summary-{os.getpid()}.md"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text("", encoding="utf-8")
    cmd = verb_command(s, config, summary)
    if s.mode in ("pr", "merge"):
        # A review.json already in the checkout (left over, or committed by the pull request) must
        # never be reported or uploaded as this run's result.
        Path(s.review_file).unlink(missing_ok=True)
    with workflow.group(f"{TITLE}: graphmend {s.mode}"):
        print("$ graphmend " + " ".join(cmd[4:]), flush=True)  # no secret is ever on the command line
        code, stdout = run_verb(cmd, child_env(s), s.workspace)
    result = _json(stdout)

    outputs = {name: "" for name in settings_mod.OUTPUTS}
    findings: list[Any] = []
    try:
        if s.mode in ("pr", "post", "merge") and Path(s.review_file).is_file():
            produced, findings, passed = review_outputs(Path(s.review_file), s.fail_on)
            outputs.update(produced)
            # A shard's gate is decided by merge, over every shard.
            if s.mode in ("pr", "merge") and not s.shard and s.fail_on and code in (0, 1):
                code = 0 if passed else 1  # the fail-on input overrides the base branch's gate.fail_on
        if s.mode == "post":
            outputs["review-url"] = review_url(s, result)
            for key, name in (("new", "new-breaks"), ("fixed", "fixed-breaks")):
                if key in result:
                    outputs[name] = str(result[key])
        if s.mode == "scan":
            outputs.update(scan_outputs(s, result))
            annotate_sarif(Path(s.sarif_file))
    except Exception as exc:  # a bad review.json must not hide the verb's own exit code
        workflow.command("error", f"{Path(s.review_file).name}: {exc}", title=TITLE)
        code = code or 1
    if s.mode in ("pr", "merge"):
        annotate(findings)  # post makes its own (check-run annotations or, read-only, commands)
    workflow.write_outputs(s.output_file, outputs)
    workflow.append_summary(s.summary_file, summary.read_text(encoding="utf-8"))
    summary.unlink(missing_ok=True)
    if code not in (0, 1):
        workflow.command("error", f"graphmend {s.mode} exited with code {code}: see the log above", title=TITLE)
    return code


if __name__ == "__main__":
    sys.exit(main())
