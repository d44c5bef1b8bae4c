"""The action's settings: the ONLY place that reads ``INPUT_*`` and ``GITHUB_*``/``RUNNER_*``.

A composite action does not get ``INPUT_*`` variables for free: ``action.yml`` passes each input
through ``env:`` as ``INPUT_<NAME>`` (upper case, ``-`` → ``_``), and this module reads,
validates and names the bad input in its error (``SettingsError``, one line). The tables
``INPUTS`` and ``OUTPUTS`` are the source of truth that ``action.yml`` and the README's table are
tested against (``tests/action/test_contract.py``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional


class SettingsError(ValueError):
    """An input or runner variable is missing or invalid; ``str()`` names it, in one line."""


@dataclass(frozen=True)
class Input:
    name: str  # kebab-case, as in action.yml
    default: str  # the literal default in action.yml ('' = take the value from graphmend.yml)
    description: str
    choices: tuple[str, ...] = ()  # allowed values ('' always allowed when the default is '')

    @property
    def env(self) -> str:
        return "INPUT_" + self.name.upper().replace("-", "_")


BOOLEANS = ("true", "false")

INPUTS: tuple[Input, ...] = (
    Input("mode", "auto", "What to run: `pr` (analyse a pull request, write review.json; no token needed), "
          "`post` (post a review.json; no PR code runs), `scan` (whole repository: SARIF, summary, fix PR), "
          "`merge` (join the partial reviews of a sharded `pr` into review-file; no PR code runs), "
          "or `auto` (from the event: pull_request → pr, workflow_run → post, schedule/workflow_dispatch/push → scan).",
          ("auto", "pr", "post", "scan", "merge")),
    Input("config", "", "Path of graphmend.yml relative to the repository root (default: `graphmend.yml` or "
          "`.github/graphmend.yml`)."),
    Input("github-token", "${{ github.token }}", "Token for `post` and `scan`: pull-requests: write, checks: write "
          "(post); contents: write, pull-requests: write (scan fix PR). Never needed by `pr`."),
    Input("fail-on", "", "Merge gate: `new-breaks`, `any-break` or `never` (overrides gate.fail_on).",
          ("new-breaks", "any-break", "never")),
    Input("safety", "", "Lowest fix safety to suggest: `safe` or `unsafe` (overrides fix.safety when posting).",
          ("safe", "unsafe")),
    Input("sandbox", "", "Where the PR's code runs: `docker` or `subprocess` (overrides sandbox.runner).",
          ("docker", "subprocess")),
    Input("image", "", "Docker image for the sandbox, with your model's dependencies (overrides sandbox.image)."),
    Input("comment", "", "Sticky benchmark comment: `always`, `on-change` or `never` (overrides review.comment "
          "when posting).",
          ("always", "on-change", "never")),
    Input("suggestions", "", "`true` or `false`: post verified fixes as suggestion blocks (overrides "
          "review.suggestions when posting); in `scan`, `false` proposes no fixes and opens no fix PR.", BOOLEANS),
    Input("benchmark", "false", "Benchmark the verified fixes in `pr` mode: `true` or `false`.", BOOLEANS),
    Input("allow-unsandboxed", "false", "`true` lets `pr` run the pull request's code with the subprocess runner "
          "where bubblewrap is not usable (it then isolates crashes, not hostile code); the default refuses. "
          "Use `sandbox: docker` instead.", BOOLEANS),
    Input("sarif-file", "graphmend.sarif", "Where `scan` writes its SARIF file (for upload-sarif)."),
    Input("review-file", "review.json", "Where `pr` writes review.json and where `post` reads it."),
    Input("cache-dir", "", "Where `pr` keeps the base's results between runs: a folder to save and restore with "
          "actions/cache (default: ~/.cache/graphmend/base, which ephemeral runners lose)."),
    Input("shard", "", "`I/N`: `pr` analyses the I-th of N balanced shares of the targets and writes a partial "
          "review to review-file (use a matrix, then `mode: merge`)."),
    Input("partials", "graphmend-partials", "The folder of partial reviews `merge` joins into review-file."),
)

OUTPUTS: dict[str, str] = {
    "new-breaks": "Graph breaks the pull request adds (not accepted by the baseline); in `scan`, all breaks found.",
    "fixed-breaks": "Graph breaks the pull request removes.",
    "suggestions": "Verified fixes offered as suggestions (`pr`/`post`) or put in the fix PR (`scan`).",
    "review-url": "URL of the posted review (`post`) or of the fix pull request (`scan`); empty otherwise.",
    "speedup": "Best steady-state speedup measured over the targets (e.g. `1.42`); empty when not benchmarked.",
}

# Events and the mode `auto` picks for them. pull_request_target is deliberately absent: it runs
# with a write token, and analysing the PR's code there hands that token to untrusted code.
AUTO_MODES = {
    "pull_request": "pr",
    "workflow_run": "post",
    "schedule": "scan",
    "workflow_dispatch": "scan",
    "push": "scan",
}


@dataclass(frozen=True)
class Settings:
    mode: str  # pr | post | scan (auto resolved)
    config: Optional[str]
    fail_on: Optional[str]
    safety: Optional[str]
    sandbox: Optional[str]
    image: Optional[str]
    comment: Optional[str]
    suggestions: Optional[bool]
    benchmark: bool
    allow_unsandboxed: bool
    sarif_file: str
    review_file: str
    event_name: str
    event: Mapping = field(repr=False)
    workspace: Path
    output_file: Optional[Path]
    summary_file: Optional[Path]
    temp_dir: Path
    repository: str
    server_url: str
    api_url: Optional[str]
    github_token: str = field(default="", repr=False)  # never printed
    cache_dir: Optional[str] = None
    shard: Optional[str] = None
    partials: str = ""

    def overrides(self) -> dict[str, dict[str, object]]:
        """The config keys the inputs override (inputs beat graphmend.yml, flags beat both)."""
        pairs = {
            ("gate", "fail_on"): self.fail_on,
            ("fix", "safety"): self.safety,
            ("sandbox", "runner"): self.sandbox,
            ("sandbox", "image"): self.image,
            ("review", "comment"): self.comment,
            ("review", "suggestions"): self.suggestions,
        }
        out: dict[str, dict[str, object]] = {}
        for (section, key), value in pairs.items():
            if value is not None:
                out.setdefault(section, {})[key] = value
        return out


def _get(env: Mapping[str, str], spec: Input) -> str:
    # An input left out of `env:` reads as its default; an explicit empty string is "not set".
    value = env.get(spec.env)
    if value is None:
        value = "" if spec.default.startswith("${{") else spec.default
    value = value.strip()
    if spec.choices and value and value not in spec.choices:
        raise SettingsError(f"input '{spec.name}': '{_short(value)}' is not one of "
                            f"{', '.join(spec.choices)}")
    return value


def _short(value: str) -> str:
    value = value.replace("\n", " ")
    return value if len(value) <= 60 else value[:57] + "..."


def _path_input(name: str, value: str, workspace: Path) -> str:
    if not value:
        raise SettingsError(f"input '{name}': must not be empty")
    if "\n" in value or "\0" in value:
        raise SettingsError(f"input '{name}': must be a single path")
    path = Path(value)
    resolved = (workspace / path).resolve() if not path.is_absolute() else path.resolve()
    if not path.is_absolute() and workspace.resolve() not in (resolved, *resolved.parents):
        raise SettingsError(f"input '{name}': '{_short(value)}' points outside the workspace")
    return str(resolved)


def load(env: Optional[Mapping[str, str]] = None) -> Settings:
    """Read and validate the inputs and the runner's variables (``os.environ`` by default)."""
    env = os.environ if env is None else env
    values = {spec.name: _get(env, spec) for spec in INPUTS}

    workspace = Path(env.get("GITHUB_WORKSPACE") or os.getcwd())
    if not workspace.is_dir():
        raise SettingsError(f"GITHUB_WORKSPACE: '{workspace}' is not a directory")

    event_name = env.get("GITHUB_EVENT_NAME", "").strip()
    event: dict = {}
    event_path = env.get("GITHUB_EVENT_PATH", "").strip()
    if event_path:
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsError(f"GITHUB_EVENT_PATH: cannot read '{event_path}': {exc.strerror}") from None
        except ValueError as exc:
            raise SettingsError(f"GITHUB_EVENT_PATH: '{event_path}' is not JSON: {exc}") from None
        if not isinstance(event, dict):
            raise SettingsError(f"GITHUB_EVENT_PATH: '{event_path}' does not hold a JSON object")

    mode = values["mode"]
    if mode == "auto":
        if event_name == "pull_request_target":
            raise SettingsError(
                "input 'mode': auto refuses pull_request_target (it would run the pull request's code "
                "with a write token); analyse on pull_request and post from workflow_run")
        if event_name not in AUTO_MODES:
            raise SettingsError(f"input 'mode': auto cannot choose a mode for the event "
                                f"'{event_name or '(none)'}'; set mode to pr, post or scan")
        mode = AUTO_MODES[event_name]
    if mode == "pr" and not (event.get("pull_request") or {}).get("head"):
        raise SettingsError(f"input 'mode': pr needs a pull_request event payload (event is "
                            f"'{event_name or '(none)'}')")

    # action.yml hands no token to a pr step at all; one that arrives anyway (a workflow calling
    # this module directly) is dropped here, before anything could pass it on.
    token = "" if mode in ("pr", "merge") else env.get("INPUT_GITHUB_TOKEN", "").strip()
    if mode in ("post",) and not token:
        # post degrades to annotations without a token, but an empty input is almost always a
        # workflow mistake (a secret that does not exist), so it is named rather than guessed.
        raise SettingsError("input 'github-token': empty; post needs a token with pull-requests: write")

    config = values["config"] or None
    if config is not None:
        config = _path_input("config", config, workspace)

    def flag(name: str) -> Optional[bool]:
        return None if not values[name] else values[name] == "true"

    temp = Path(env.get("RUNNER_TEMP") or "/tmp")
    out_file = env.get("GITHUB_OUTPUT", "").strip()
    summary = env.get("GITHUB_STEP_SUMMARY", "").strip()
    return Settings(
        mode=mode,
        config=config,
        fail_on=values["fail-on"] or None,
        safety=values["safety"] or None,
        sandbox=values["sandbox"] or None,
        image=values["image"] or None,
        comment=values["comment"] or None,
        suggestions=flag("suggestions"),
        benchmark=values["benchmark"] == "true",
        allow_unsandboxed=values["allow-unsandboxed"] == "true",
        sarif_file=_path_input("sarif-file", values["sarif-file"], workspace),
        review_file=_path_input("review-file", values["review-file"], workspace),
        event_name=event_name,
        event=event,
        workspace=workspace,
        output_file=Path(out_file) if out_file else None,
        summary_file=Path(summary) if summary else None,
        temp_dir=temp,
        repository=env.get("GITHUB_REPOSITORY", "").strip(),
        server_url=(env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/"),
        api_url=(env.get("GITHUB_API_URL") or "").strip() or None,
        github_token=token,
        cache_dir=_cache_dir(values["cache-dir"], workspace),
        shard=_shard(values["shard"]),
        partials=_path_input("partials", values["partials"], workspace),
    )


def _cache_dir(value: str, workspace: Path) -> Optional[str]:
    """A folder anywhere (runner.temp is outside the workspace); relative to the workspace."""
    if not value:
        return None
    if "\n" in value or "\0" in value:
        raise SettingsError("input 'cache-dir': must be a single path")
    path = Path(value)
    return str(path if path.is_absolute() else (workspace / path).resolve())


def _shard(value: str) -> Optional[str]:
    if not value:
        return None
    from graphmend.shard import ShardError, parse

    try:
        index, count = parse(value)
    except ShardError as exc:
        raise SettingsError(f"input 'shard': {str(exc).split(': ', 1)[-1]}") from None
    return f"{index}/{count}"


def markdown_tables() -> str:
    """The inputs and outputs tables of the README and docs/action.md (tested to agree)."""
    def default(spec: Input) -> str:
        return f"`{spec.default}`" if spec.default else "(graphmend.yml)"

    lines = ["| input | default | description |", "|---|---|---|"]
    lines += [f"| `{i.name}` | {default(i)} | {i.description.replace('|', '/')} |" for i in INPUTS]
    lines += ["", "| output | description |", "|---|---|"]
    lines += [f"| `{name}` | {text} |" for name, text in OUTPUTS.items()]
    return "\n".join(lines) + "\n"
