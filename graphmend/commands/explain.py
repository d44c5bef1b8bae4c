"""``graphmend explain GMxxx``: one rule's documentation, in its fixed sections."""

from __future__ import annotations

import argparse
import json
import sys

# The design document the rules' references cite, as it is named in GraphMend's repository.
DESIGN_DOC = "docs/design.md"


def _doc(text: str) -> str:
    """A rule's doc text with its design references pointing at the document in the repository."""
    return text.replace("DESIGN.md", f"GraphMend's {DESIGN_DOC}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", metavar="GMxxx", help="a rule code, e.g. GM101")


def render(rule) -> str:
    from graphmend.transforms.base import DOC_SECTIONS

    lines = [f"{rule.code} {rule.name} ({rule.safety.value})", "", rule.summary, ""]
    for section in DOC_SECTIONS:
        lines += [f"## {section}", "", _doc(rule.docs[section]).strip(), ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from graphmend.cli import UsageError
    from graphmend.transforms.base import DOC_SECTIONS
    from graphmend.transforms.registry import all_rules, get_rule

    rule = get_rule(args.code)
    if rule is None:
        known = ", ".join(r.code for r in all_rules())
        raise UsageError(f"no rule {args.code!r} (known: {known})")
    if args.format == "json":
        data = {"code": rule.code, "name": rule.name, "safety": rule.safety.value, "summary": rule.summary,
                "docs": {s: _doc(rule.docs[s]) for s in DOC_SECTIONS}}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(render(rule))
    return 0
