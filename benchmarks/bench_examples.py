"""Benchmark (not a test): ``graphmend bench`` on the bundled examples, run as a user would.

Two experiments, each in a fresh git repository holding a copy of ``examples/``:

- ``--aa``: an A/A check. The working tree differs from HEAD by one comment only, so nothing
  a target runs has changed: every ratio of every target must say ``no-change``. Any other
  verdict is a false claim (or a machine too noisy for the figures it prints).
- ``--fixes``: the examples' real fixes. ``graphmend fix`` rewrites the copy, then
  ``graphmend bench`` measures HEAD (the original) against the fixed working tree. With
  ``--backend inductor`` every target is compiled with inductor (both arms alike); the
  verdicts must match their intervals (``faster`` only above 1, ``slower`` only below).

Both print the bench text (torch version, device, dtype, backend per target), the machine's
load average before and after, and a check of every verdict against its interval; the bench
JSON goes to ``--out``.

    python benchmarks/bench_examples.py --aa [--rounds N] [--target NAME ...] [--out DIR]
    python benchmarks/bench_examples.py --fixes --backend inductor [--rounds N] [--target NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
GRAPHMEND = [sys.executable, "-m", "graphmend"]


def _git(repo: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@localhost",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@localhost")
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def prepare(dest: Path, backend: str | None) -> Path:
    """A git repository at ``dest`` with the examples committed (the backend set first)."""
    shutil.copytree(EXAMPLES, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "workflows"))
    if backend:
        config = dest / "graphmend.yml"
        config.write_text(re.sub(r"(?m)^(\s+backend:\s*)\S+", rf"\g<1>{backend}", config.read_text()))
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "examples")
    return dest


def check_verdicts(report: dict) -> list[str]:
    """Every verdict against its interval: faster only above 1, slower only below."""
    problems = []
    for t in report["targets"]:
        for p in t["points"]:
            for metric in ("cold_start", "steady", "throughput", "eager"):
                verdict, ci = p.get(f"{metric}_verdict"), p.get(f"{metric}_ci")
                if verdict == "faster" and not (ci and ci[0] > 1):
                    problems.append(f"{t['name']} {metric}: faster with interval {ci}")
                if verdict == "slower" and not (ci and ci[1] < 1):
                    problems.append(f"{t['name']} {metric}: slower with interval {ci}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--aa", action="store_true", help="HEAD vs the same tree plus one comment")
    mode.add_argument("--fixes", action="store_true", help="HEAD vs the tree after graphmend fix")
    parser.add_argument("--backend", help="set every target's backend (default: as configured)")
    parser.add_argument("--rounds", type=int, default=None, help="default: bench's own")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--out", default=None, help="folder for bench.json and bench.txt (default: a temp dir)")
    args = parser.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="graphmend-bench-examples-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    repo = out / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    prepare(repo, args.backend)
    if args.aa:
        model = repo / "src" / "tinymodels" / "moe.py"
        model.write_text(model.read_text() + "# a comment: nothing a target runs has changed\n")
    else:
        subprocess.run([*GRAPHMEND, "fix", "-C", str(repo)], check=False)
    cmd = [*GRAPHMEND, "bench", "-C", str(repo), "--format", "json", "--markdown", str(out / "bench.md")]
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    cmd += [x for name in args.target for x in ("--target", name)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    print(f"load average before: {os.getloadavg()}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    print(f"load average after:  {os.getloadavg()}", flush=True)
    (out / "bench.json").write_text(done.stdout)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode or 1
    report = json.loads(done.stdout)
    from graphmend.bench.results import BenchReport
    from graphmend.model import from_dict
    from graphmend.report.markdown_verify import render_bench_text

    text = render_bench_text(from_dict(BenchReport, report))
    (out / "bench.txt").write_text(text)
    print(text)
    problems = check_verdicts(report)
    if args.aa:
        problems += [f"{t['name']} {m}: {p[f'{m}_verdict']} on an A/A check" for t in report["targets"] for p in t["points"]
                     for m in ("cold_start", "steady", "throughput", "eager") if p.get(f"{m}_verdict") not in (None, "no-change")]
        problems += [f"{t['name']}: {t['error']}" for t in report["targets"] if t["error"]]
    print("verdicts: " + ("every one consistent" + (" and no-change" if args.aa else "") + " ✓" if not problems
                          else "PROBLEMS\n  " + "\n  ".join(problems)))
    print(f"figures in {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
