"""``graphmend fix [PATH...] [--target NAME] [--diff] [--unsafe-fixes]``.

Rewrites the fixable graph breaks in place (or prints the unified diff with ``--diff``). With
targets in the configuration (or ``--target``) every fix is re-detected on a copy of the tree
and verified (``--no-verify`` skips that) before anything is written; without one, static candidates are applied only with
``--unsafe-fixes`` and are reported as unverified.

Exit codes: 0 nothing left to fix (or everything fixed); 1 findings remain (declined, unsafe
without opt-in, unfixable), a target failed, or a file could not be read; 2 usage/config.
"""

from __future__ import annotations

import argparse
import json
import sys

from graphmend.commands import config_from_args, warn

EPILOG = (
    "Exit codes: 0 nothing left to fix or everything fixed; 1 findings remain (declined, unsafe "
    "without --unsafe-fixes, unfixable), a target failed or a file could not be read; 2 usage or "
    "configuration error."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("paths", nargs="*", metavar="PATH", help="only edit these files or folders (default: the config's paths)")
    parser.add_argument("--target", action="append", metavar="NAME", help="detect on this target (repeatable; default: all configured)")
    parser.add_argument("--diff", action="store_true", help="print the unified diff instead of writing the files")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes marked unsafe (and unverified static candidates)")
    parser.add_argument("--static", action="store_true", help="ignore the targets: fix static candidates (needs --unsafe-fixes)")
    parser.add_argument("--no-verify", action="store_true",
                        help="do not run verify on each round's fixes before writing (faster; breaks and graphs are "
                             "still re-detected, and a round that makes a target worse is still rolled back)")


def run(args: argparse.Namespace) -> int:
    from graphmend.cli import UsageError
    from graphmend.fix import apply_fixes
    from graphmend.model import to_dict

    config = config_from_args(args)
    if args.static and args.target:
        raise UsageError("--static and --target exclude each other")
    if args.target:
        for name in args.target:
            config.target(name)  # ConfigError (exit 2) for an unknown name, before anything runs
    targets = [] if args.static else (args.target or None)
    if args.static:
        config = _without_targets(config)

    def progress(message: str) -> None:
        if sys.stderr.isatty():
            print(f"graphmend fix: {message}", file=sys.stderr)

    report = apply_fixes(config, args.paths or None, targets, unsafe=args.unsafe_fixes, write=not args.diff, progress=progress,
                         verify=not args.no_verify)
    for e in report.errors:
        warn("fix", f"{e.path}: {e.message}")
    for t in report.targets:
        if t.error:
            warn("fix", f"target {t.name}: {t.error.splitlines()[0]}")
    if args.format == "json":
        data = to_dict(report)
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif args.diff:
        # stdout is the patch alone (`graphmend fix --diff | git apply`); the summary goes to stderr
        sys.stdout.write("".join(change.diff for change in report.changes))
        sys.stderr.write(render_text(report, diff=True))
    else:
        sys.stdout.write(render_text(report, diff=False))
    return report.exit_code


def _without_targets(config):
    import dataclasses

    return dataclasses.replace(config, targets=())


def render_text(report, *, diff: bool) -> str:
    out: list[str] = []
    if report.mode == "static":
        out.append("static candidates (unverified: nothing was run; use --target to verify)\n")
    for t in report.targets:
        state = f"error: {t.error.splitlines()[0]}" if t.error else f"breaks {t.breaks_before} -> {t.breaks_after}, graphs {t.graphs_before} -> {t.graphs_after}"
        if not t.error and (t.recompiles_before or t.recompiles_after):
            state += f", recompilations {t.recompiles_before} -> {t.recompiles_after}"
        out.append(f"target {t.name}: {state}\n")
    for f in report.applied:
        out.append(f"{f.file}:{f.line}: {f.rule} fixed: {f.title}" + (f" [{f.safety.value}]" if f.safety.value != "safe" else "") + "\n")
    for s in report.skipped:
        out.append(f"{s.fix.file}:{s.fix.line}: {s.fix.rule} not applied: {s.reason}\n")
        if not s.fix.edits and s.fix.notes:  # a lever with nothing to edit here (GM5xx): what to add, and where
            out.append(f"    {s.fix.title}: {s.fix.notes}\n")
    for d in report.declined:
        out.append(f"{d.file}:{d.line}: {d.rule} declined: {d.reason}\n")
    for r in report.rolled_back:
        head, why = r.split(":", 1)
        how = "partly rolled back" if "taken back" in why else "rolled back"
        out.append(f"{head} {how} (the target would be worse):{why}\n")
    for w in report.withdrawn:
        out.append(f"{w.file}:{w.line}: {w.rule} {w.error}\n")
    for f in report.failed:
        out.append(f"{f.file}:{f.line}: {f.rule} failed: {f.error}\n")
    for p in report.patches:
        out.append(f"{p.file}: outside `paths`, not edited; the fix as a patch:\n{p.diff}")
    verb = "would change" if diff else "changed"
    files = len(report.changes)
    out.append(
        f"{len(report.applied)} fix(es) applied, {files} file(s) {verb}; "
        f"{len(report.remaining)} break(s) remain, {len(report.declined)} declined, {len(report.skipped)} not applied"
        + (f", {len(report.withdrawn)} withdrawn by verify" if report.withdrawn else "") + "\n"
    )
    return "".join(out)
