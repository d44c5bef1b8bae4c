"""Benchmark (not a test): ``graphmend check`` (dynamic) vs a bare ``torch._dynamo.explain``.

Both sides run every target of a repository (default: ``examples/``) in a fresh Python
process, so the ratio is the cost of GraphMend's detection (hooks, classification, the
worker protocol) over what PyTorch's own tool costs on the same targets, measured in one run.
It also prints what each side counted, since ``explain()`` counts differently (graphs - 1,
and nothing for a skipped frame).

    python benchmarks/bench_check.py [REPO] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPLAIN = """
import json, sys, time
import torch, torch._dynamo
from graphmend.targets import load_target
target = json.loads(sys.argv[1])
loaded = load_target(target)
torch._dynamo.reset()
started = time.monotonic()
with torch.no_grad():
    result = torch._dynamo.explain(loaded.fn)(*loaded.args, **loaded.kwargs)
print(json.dumps({"graphs": result.graph_count, "breaks": result.graph_break_count, "run_s": time.monotonic() - started}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", nargs="?", default=str(HERE.parent / "examples"))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    from graphmend.config import load_config
    from graphmend.detect.dynamic import detect_targets
    from graphmend.model import to_dict

    config = load_config(args.repo)
    root = config.root
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(HERE.parent)]))
    ours, theirs = [], []
    counts: dict[str, dict] = {}
    for _ in range(args.repeat):
        started = time.monotonic()
        results = detect_targets(config)
        ours.append(time.monotonic() - started)
        for r in results:
            counts.setdefault(r.name, {})["graphmend"] = (r.graph_count, r.break_count, r.skipped_frames, r.error)
        started = time.monotonic()
        for target in config.targets:
            proc = subprocess.run([sys.executable, "-c", EXPLAIN, json.dumps(to_dict(target))], cwd=root, env=env,
                                  capture_output=True, text=True, timeout=config.sandbox.timeout_s)
            if proc.returncode != 0:
                counts.setdefault(target.name, {})["explain"] = ("error", proc.stderr.strip().splitlines()[-1:])
                continue
            data = json.loads(proc.stdout.strip().splitlines()[-1])
            counts.setdefault(target.name, {})["explain"] = (data["graphs"], data["breaks"])
        theirs.append(time.monotonic() - started)

    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"repository: {root} ({len(config.targets)} targets, median of {args.repeat} run(s))")
    print(f"graphmend check (dynamic): {a:.2f} s")
    print(f"bare torch._dynamo.explain: {b:.2f} s")
    print(f"ratio check / explain:     {a / b:.2f}x")
    print("per target: graphmend (graphs, breaks incl. skipped frames, skipped frames, error) | explain (graphs, breaks)")
    for name, c in counts.items():
        print(f"  {name}: {c.get('graphmend')} | {c.get('explain')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
