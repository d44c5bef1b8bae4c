"""``graphmend rules``: every rule's code, name, safety and what it fixes (from the registry)."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--select", action="append", metavar="PREFIX", help="only rules whose code starts with PREFIX")


def rule_rows(select=None) -> list[dict]:
    from graphmend.transforms.registry import all_rules

    rows = []
    for r in all_rules():
        if select and not any(r.code.startswith(p.upper()) for p in select):
            continue
        rows.append({"code": r.code, "name": r.name, "safety": r.safety.value, "summary": r.summary,
                     "categories": [c.value for c in r.categories]})
    return rows


def run(args: argparse.Namespace) -> int:
    rows = rule_rows(args.select)
    if args.format == "json":
        sys.stdout.write(json.dumps({"version": 1, "rules": rows}, indent=2) + "\n")
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        sys.stdout.write(f"{r['code']}  {r['name']:<{width}}  {r['safety']:<12}  {r['summary']}\n")
    return 0
