"""``--format json``: docs/design.md's contract, shape in ``graphmend/schemas/check.schema.json``.

``model.to_dict`` is the single source of every field; this module only fixes the order of the
top-level keys and of the findings, so the same report gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import json

from graphmend.model import CheckReport, to_dict
from graphmend.report import sort_breaks


def sorted_report(report: CheckReport) -> CheckReport:
    """``report`` with targets by name and findings and errors in report order."""
    targets = tuple(
        dataclasses.replace(t, breaks=sort_breaks(t.breaks)) for t in sorted(report.targets, key=lambda t: t.name)
    )
    errors = tuple(sorted(report.errors, key=lambda e: (e.path, e.message)))
    return dataclasses.replace(report, targets=targets, static=sort_breaks(report.static), errors=errors)


def check_data(report: CheckReport) -> dict:
    report = sorted_report(report)
    return {
        "version": report.version,
        "targets": to_dict(report.targets),
        "static": to_dict(report.static),
        "errors": to_dict(report.errors),
    }


def render_json(report: CheckReport) -> str:
    return json.dumps(check_data(report), indent=2, ensure_ascii=False) + "\n"
