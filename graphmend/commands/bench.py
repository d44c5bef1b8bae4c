"""``graphmend bench [--target NAME] [--base REV]``: cold start, steady state, throughput.

"Before" is the tree at REV (default HEAD), "after" the working tree. Every ratio comes with a
confidence interval over the rounds and a verdict (faster / slower / no-change). When the two
trees have the same source files nothing is measured unless ``--aa`` asks for an A/A check of
the machine's noise. Exit codes: 0 measured (or nothing to measure); 1 a target that could not
be measured; 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse

from graphmend.bench.stats import CONFIDENCE, DEFAULT_ROUNDS, MIN_EFFECT, MIN_ROUNDS
from graphmend.commands import UsageError, config_from_args, progress_to_stderr, warn, write_report


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError("must be at least 0 and below 100")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", action="append", metavar="NAME", help="bench only this target (repeatable)")
    parser.add_argument("--base", default="HEAD", metavar="REV", help='the "before" tree (default: HEAD)')
    parser.add_argument("--rounds", type=_positive, default=DEFAULT_ROUNDS,
                        help=f"fresh-process runs per arm, interleaved A B A B (default: {DEFAULT_ROUNDS}; "
                             f"{MIN_ROUNDS} or more give a {CONFIDENCE * 100:.0f}%% interval; more narrow it)")
    parser.add_argument("--min-effect", type=_percent, default=MIN_EFFECT * 100, metavar="PCT",
                        help=f"smallest change called faster or slower, in percent (default: {MIN_EFFECT * 100:g})")
    parser.add_argument("--aa", action="store_true",
                        help="measure even when the trees have the same source: an A/A check of the machine's noise "
                             "(every verdict should be no-change)")
    parser.add_argument("--threads", type=_positive, default=None, help="threads per worker (default: OMP_NUM_THREADS or all CPUs)")
    parser.add_argument("--warmup", type=int, default=None, help="override bench.warmup")
    parser.add_argument("--repeat", type=_positive, default=None, help="override bench.repeat")
    parser.add_argument("--markdown", metavar="FILE", help="also write the markdown table to FILE")
    parser.add_argument("--chart", metavar="FILE", help="also write a PNG chart of latency before and after")


def run(args: argparse.Namespace) -> int:
    from graphmend.bench import bench
    from graphmend.trees import TreeError

    config = config_from_args(args)
    if not config.targets:
        raise UsageError(f"{config.display_file}: no targets configured: bench runs targets (see graphmend init)")
    changes = {k: v for k, v in (("warmup", args.warmup), ("repeat", args.repeat)) if v is not None}
    if changes.get("warmup", 0) < 0:
        raise UsageError("--warmup: must be 0 or more")
    if changes:
        config = config.replace_section("bench", **changes)
    try:
        report = bench(config, args.target or None, base=args.base, progress=progress_to_stderr("bench"),
                       rounds=args.rounds, threads=args.threads, min_effect=args.min_effect / 100, aa=args.aa)
    except TreeError as exc:
        raise UsageError(str(exc)) from None
    from graphmend.report.markdown_verify import render_bench_markdown, render_bench_text

    write_report(args, "bench", report, render_bench_text, render_bench_markdown, "bench_report")
    for t in report.targets:
        if t.error:
            warn("bench", f"target {t.name}: {t.error}")
    return 1 if report.failed else 0
