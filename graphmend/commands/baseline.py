"""``graphmend baseline``: write or update the accepted-breaks file the merge gate reads.

It runs the same detection as ``check`` (or reads a finished ``check --format json`` with
``--from-json``), accepts every break found, keeps what was accepted before exactly as it was,
and drops entries whose break is gone (never when a target could not run). The file is
``gate.baseline`` of the configuration unless ``--output`` says otherwise.

Exit codes: 0 written (or already up to date); 1 a target or file could not be analysed (new
breaks are still accepted, nothing is dropped); 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmend.commands import UsageError, config_from_args, warn


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", metavar="FILE", help="the baseline file (default: gate.baseline of the config)")
    parser.add_argument("--reason", default=None, metavar="TEXT",
                        help="why the new breaks are accepted (recorded with each new entry)")
    parser.add_argument("--from-json", metavar="FILE", help="use this `graphmend check --format json` output instead of running detection")
    parser.add_argument("--keep-missing", action="store_true", help="keep entries whose break was not found")
    parser.add_argument("--no-dynamic", action="store_true", help="do not run the targets (static candidates only)")


def run(args: argparse.Namespace) -> int:
    from graphmend import baseline
    from graphmend.model import CheckReport, from_dict

    config = config_from_args(args)
    out = Path(args.output) if args.output else config.root / config.gate.baseline
    try:
        existing = baseline.read(out)
    except baseline.BaselineError as exc:
        raise UsageError(str(exc)) from None
    if args.from_json:
        try:
            report = from_dict(CheckReport, json.loads(Path(args.from_json).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"{args.from_json}: not a `graphmend check --format json` report: {exc}") from None
    else:
        from graphmend.check import check

        report = check(config, dynamic=not args.no_dynamic)
    for t in report.targets:
        if t.error:
            print(f"graphmend baseline: target {t.name} could not run (its accepted breaks are kept): "
                  f"{t.error.splitlines()[0] if t.error else ''}", file=sys.stderr)
    for e in report.errors:
        warn("baseline", f"{e.path}: {e.message}")
    result = baseline.update(existing, report, reason=args.reason or baseline.DEFAULT_REASON,
                             commit=baseline.current_commit(config.root), prune=not args.keep_missing)
    changed = baseline.write(out, result)
    try:
        shown = out.resolve().relative_to(config.root.resolve())
    except ValueError:
        shown = out
    if args.format == "json":
        print(json.dumps({"file": str(shown), "changed": changed, "accepted": len(result.entries),
                          "added": [e.fingerprint for e in result.added],
                          "removed": [e.fingerprint for e in result.removed],
                          "held": [e.fingerprint for e in result.held]}, indent=2, sort_keys=True))
    else:
        print(f"graphmend baseline: {shown}: {len(result.entries)} accepted ({len(result.added)} added, "
              f"{len(result.kept)} kept, {len(result.removed)} removed"
              + (f", {len(result.held)} kept although not seen" if result.held else "")
              + ("" if changed else "; unchanged") + ")")
    return 1 if report.failed else 0
