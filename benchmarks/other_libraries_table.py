"""Benchmark-style table (not a test): break sites in diffusers, kornia and torchmetrics, before -> after.

The entry points (``benchmarks/other_libraries_targets.py``: scheduler steps, an edge detector and a
colour augmentation, functional metrics) are built tiny as their users call them (fp32, CPU, seeded
random data, no download). The installed packages are copied into a throwaway git repository under
``src/`` (``benchmarks/copied_repo.py``) and the entry points compiled outside them by GraphMend's
worker; the real pipeline runs as in ``cross_file_table.py``: the fix loop at the default safety
(dynamic detection, every rule, re-detection, write), then ``verify`` of the committed tree against
the fixed one (outputs eager original vs compiled fixed at torch.testing's fp32 tolerances; printed
text, log records, warnings in order). Breaks are distinct sites as the fix loop counts them. The
reasons left are ``check``'s for what remains after the fixes.

A second run gives each entry point whose remaining breaks GM501/GM502 answer with a compile
setting (display-only here: the compile site is the worker's, outside ``paths``) that setting at its
compile site (the target's ``dynamo_config``), as the finding tells the user to, and fixes again.

    python benchmarks/other_libraries_table.py [--targets euler_step,tm_pearson,...] [--no-settings-arm]

The libraries are not dependencies of GraphMend (no test needs them). Installed as measured, with
``--no-deps`` so that nothing replaces the pinned torch::

    pip install --no-deps diffusers==0.35.2 kornia==0.9.2 kornia_rs torchmetrics==1.9.0 lightning-utilities

(diffusers 0.36+ imports a ``huggingface_hub`` newer than transformers 4.52.4 accepts; timm is left
out: it imports torchvision, whose wheels do not load their operators next to the CPU torch 2.13.)
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

LIBRARIES = ("diffusers", "kornia", "torchmetrics")


def write_repo(root: Path, names: list[str], settings: Optional[dict[str, set[str]]] = None) -> Path:
    import importlib

    from benchmarks import other_libraries_targets
    from benchmarks.copied_repo import make_repo

    return make_repo(root, [importlib.import_module(n) for n in LIBRARIES],
                     Path(other_libraries_targets.__file__).read_text(), {n: n for n in names}, settings=settings)


_SETTING = re.compile(r"^torch\._dynamo\.config\.(\w+) = True")


def proposed_settings(report) -> dict[str, set[str]]:
    """Target -> the capture settings proposed for its compile site: a remaining break's lever, and
    a GM501/GM502 fix shown display-only (the compile site is the worker's, outside ``paths``) at
    one of the target's remaining sites; the two can name different settings for one site."""
    from graphmend.rules import CONFIG_RULES

    setting_of = {code: name for name, code in CONFIG_RULES.items()}
    shown: dict[tuple[str, int], set[str]] = {}
    for s in report.skipped:
        if s.fix.rule in setting_of:
            shown.setdefault((s.fix.file, s.fix.line), set()).add(setting_of[s.fix.rule])
    out: dict[str, set[str]] = {}
    for b in report.remaining:
        m = _SETTING.match(b.lever_reason or "")
        found = ({m.group(1)} if m else set()) | shown.get((b.file, b.line), set())
        if found:
            out.setdefault(b.target or "?", set()).update(found)
    return out


def reason_class(b) -> str:
    """A remaining break's class: its kind, and the rules that declined it (or the setting proposed)."""
    m = _SETTING.match(b.lever_reason or "")
    if m:
        return f"{b.gb_type}: {m.group(1)} proposed at the compile site"
    rules = sorted(set(re.findall(r"\bGM\d{3}\b", b.lever_reason or "")))
    return f"{b.gb_type or b.reason}: " + ("/".join(rules) + " declined" if rules else "no rule")


def why(b) -> str:
    """A remaining break's reason in a few words: the rule's decline or the lever."""
    reason = (b.lever_reason or "").split(". ")[0].split(": ")[-1].split("\n")[0][:60]
    return f"{b.gb_type or b.reason}" + (f" ({reason})" if reason else "")


def _equal(name: str, report, checked) -> str:
    v = {t.name: t for t in checked.targets}.get(name)
    if v is None:
        return "unchanged (no fix applied)" if not report.applied else "NO: not verified"
    detail = "; ".join(f"{m.kind}/{m.check}: {m.detail}" for m in v.mismatches[:2])
    return "yes" if v.ok else f"NO: {detail or v.error}"


def table(report, checked, with_settings=None) -> str:
    left: dict[str, Counter] = {}
    for b in report.remaining:
        left.setdefault(b.target or "?", Counter())[why(b)] += 1
    settings = {t.name: t for t in (with_settings[0].targets if with_settings else ())}
    lines = ["| entry point | breaks before -> after | graphs before -> after | equal | with the proposed settings: "
             "breaks (graphs) before -> after, equal | left |", "|---|---|---|---|---|---|"]
    for t in report.targets:
        s = settings.get(t.name)
        arm = (f"{s.breaks_before} -> {s.breaks_after} ({s.graphs_before} -> {s.graphs_after} graphs), "
               f"{_equal(t.name, *with_settings)}" if s else "-")
        reasons = "; ".join(f"{n}× {r}" for r, n in left.get(t.name, Counter()).most_common())
        lines.append(f"| {t.name} | {t.breaks_before} -> {t.breaks_after} | {t.graphs_before} -> {t.graphs_after} | "
                     f"{_equal(t.name, report, checked)} | {arm} | {reasons or '-'} |")
    before = sum(t.breaks_before for t in report.targets)
    after = sum(t.breaks_after for t in report.targets)
    sites = {(b.file, b.line, b.gb_type): b for b in report.remaining}
    lines.append("")
    lines.append(f"Break sites (summed over entry points): {before} -> {after}"
                 f" ({0 if not before else 100 * (before - after) / before:.0f}% removed); "
                 f"fixes applied: {len(report.applied)}; distinct sites left: {len(sites)}.")
    if with_settings:
        arm = with_settings[0].targets
        rest = [t for t in report.targets if t.name not in settings]
        total = sum(t.breaks_after for t in arm) + sum(t.breaks_after for t in rest)
        graphs = [sum(t.graphs_after for t in report.targets if t.name in settings), sum(t.graphs_after for t in arm)]
        lines.append(f"With the settings GM501/GM502 propose at each compile site ({len(arm)} entry points), "
                     f"then the fix loop: {before} -> {total} break sites "
                     f"({0 if not before else 100 * (before - total) / before:.0f}% removed; a site can move "
                     f"rather than go: those entry points' graphs {graphs[0]} -> {graphs[1]}); "
                     f"fixes applied there: {len(with_settings[0].applied)}.")
    lines.append("Distinct sites left, by class:")
    lines.extend(f"- {n}× {r}" for r, n in Counter(reason_class(b) for b in sites.values()).most_common())
    return "\n".join(lines)


def run(root: Path, names: list[str], settings=None):
    from benchmarks.cross_file_table import fix_and_verify

    write_repo(root, names, settings)
    report, checked = fix_and_verify(root, progress=lambda m: print(m, file=sys.stderr, flush=True))
    for d in report.declined:
        print(f"declined {d.rule} {d.file}:{d.line}: {d.reason}", file=sys.stderr)
    for s in report.skipped:
        print(f"skipped {s.fix.rule} {s.fix.file}:{s.fix.line}: {s.reason}; {s.fix.notes}", file=sys.stderr)
    for b in report.remaining:
        print(f"left {b.target} {b.file}:{b.line} {b.gb_type}: {b.lever_reason} | {b.source_line.strip()}",
              file=sys.stderr)
    for c in report.changes:
        print(c.diff, file=sys.stderr)
    return report, checked


def main(argv: Optional[list[str]] = None) -> int:
    from benchmarks.other_libraries_targets import ENTRY_POINTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(ENTRY_POINTS))
    parser.add_argument("--no-settings-arm", action="store_true",
                        help="skip the second run with the settings GM501/GM502 propose at the compile site")
    args = parser.parse_args(argv)
    names = [n for n in args.targets.split(",") if n]
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="graphmend-other-libraries-") as tmp:
        report, checked = run(Path(tmp) / "repo", names)
        proposed = {} if args.no_settings_arm else proposed_settings(report)
        with_settings = run(Path(tmp) / "settings", list(proposed), proposed) if proposed else None
    import importlib

    import torch

    versions = ", ".join(f"{n} {importlib.import_module(n).__version__}" for n in LIBRARIES)
    print(f"torch {torch.__version__}, {versions}, CPU, fp32, backend eager, fix.safety safe "
          f"({time.time() - start:.0f} s)")
    print(table(report, checked, with_settings))
    arms = [(report, checked)] + ([with_settings] if with_settings else [])
    wrong = [t.name for _, verified in arms for t in verified.targets if not t.ok]
    return 1 if wrong or report.errors or report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
