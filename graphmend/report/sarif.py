"""``--format sarif``: SARIF 2.1.0 as GitHub code scanning accepts it.

One rule per Dynamo GB id (with its documentation link), or per GM rule / category for a
finding Dynamo gave no id to. ``partialFingerprints`` carry the break fingerprint, which is
stable across unrelated edits, so code scanning tracks an alert across commits. Artifact URIs
are repo-relative paths; columns are 1-based. A break whose innermost frame lies outside the
repository is placed at its innermost frame inside the repository (code scanning drops
locations it cannot find in the repository); with no such frame it becomes a notification.
"""

from __future__ import annotations

import json
from typing import Optional

from graphmend.model import CheckReport, GraphBreak
from graphmend.report import break_code, lever_note, sort_breaks

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "graphmendFingerprint/v1"


def _version() -> str:
    from graphmend import __version__

    return __version__


def _rule(b: GraphBreak) -> dict:
    rule_id = break_code(b)
    title = b.gb_type or (f"{b.rule} {b.category.value}" if b.rule else b.category.value)
    rule: dict = {
        "id": rule_id,
        "name": "".join(w.capitalize() for w in b.category.value.split("-")),
        "shortDescription": {"text": f"Graph break: {title}"},
        "fullDescription": {"text": f"TorchDynamo graph break ({b.category.value}): {title}."},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["torch.compile", "graph-break", b.category.value]},
    }
    if b.doc_url:
        rule["helpUri"] = b.doc_url
        rule["help"] = {"text": f"{title}. See {b.doc_url}", "markdown": f"{title}. See [the Dynamo documentation]({b.doc_url})."}
    return rule


def _location(b: GraphBreak) -> Optional[tuple[str, int, Optional[int], str]]:
    """(uri, line, column, note) of a break inside the repository, or None."""
    if not b.outside_paths and not b.file.startswith("/"):
        return b.file, b.line, b.col, ""
    inside = [f for f in b.stack if f.inside_repo and not f.file.startswith("/")]
    if inside:
        frame = inside[-1]
        return frame.file, frame.line, None, f" (the break itself is at {b.file}:{b.line}, outside the repository)"
    return None


def _message(b: GraphBreak, note: str) -> str:
    text = b.reason + note
    text += lever_note(b)
    if b.hits > 1:
        text += f" ({b.hits} hits)"
    if not b.verified:
        text += " (unverified static candidate)"
    return text


def sarif_data(report: CheckReport) -> dict:
    rules: list[dict] = []
    rule_index: dict[str, int] = {}
    results: list[dict] = []
    notes: list[dict] = []

    def add(b: GraphBreak, target: Optional[str]) -> None:
        where = _location(b)
        if where is None:
            notes.append(
                {"level": "note", "message": {"text": f"{b.file}:{b.line}: {_message(b, '')}"}}
            )
            return
        uri, line, col, note = where
        code = break_code(b)
        if code not in rule_index:
            rule_index[code] = len(rules)
            rules.append(_rule(b))
        region: dict = {"startLine": max(1, line)}
        if col is not None:
            region["startColumn"] = col + 1
        properties = {
            "category": b.category.value,
            "fixable": b.fixable,
            "rule": b.rule,
            "lever": b.lever.value,
            "leverReason": b.lever_reason,
            "hits": b.hits,
            "verified": b.verified,
            "outsidePaths": b.outside_paths,
        }
        if target is not None:
            properties["target"] = target
        results.append(
            {
                "ruleId": code,
                "ruleIndex": rule_index[code],
                "level": "warning" if b.verified else "note",
                "message": {"text": _message(b, note)},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": region}}],
                "partialFingerprints": {FINGERPRINT_KEY: b.fingerprint or f"{uri}:{line}:{code}"},
                "properties": properties,
            }
        )

    targets = sorted(report.targets, key=lambda t: t.name)
    for t in targets:
        for b in sort_breaks(t.breaks):
            add(b, t.name)
    for b in sort_breaks(report.static):
        add(b, None)
    for t in targets:
        if t.error:
            notes.append({"level": "error", "message": {"text": f"target {t.name} could not run: {' '.join(t.error.split())}"}})
    for e in sorted(report.errors, key=lambda e: (e.path, e.message)):
        note: dict = {"level": "error", "message": {"text": f"{e.path}: {' '.join(e.message.split())}"}}
        if not e.path.startswith("/") and not e.path.startswith(".."):
            note["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": e.path}}}]
        notes.append(note)

    invocation: dict = {"executionSuccessful": not report.failed}
    if notes:
        invocation["toolExecutionNotifications"] = notes
    run = {
        "tool": {"driver": {"name": "GraphMend", "version": _version(), "semanticVersion": _version(), "rules": rules}},
        "invocations": [invocation],
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {
            "targets": [
                {"name": t.name, "graphCount": t.graph_count, "breakCount": t.break_count, "error": t.error,
                 "torchVersion": t.environment.torch_version, "device": t.environment.device,
                 "dtype": t.environment.dtype, "backend": t.environment.backend}
                for t in targets
            ]
        },
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif(report: CheckReport) -> str:
    return json.dumps(sarif_data(report), indent=2, ensure_ascii=False) + "\n"
