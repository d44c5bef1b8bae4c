"""Benchmark (not a test): static ``check`` over a large real tree vs a bare libcst parse.

Both run in this one process on the same files (by default the installed ``transformers``
package's ``models/`` folder), serially, so the ratio is the price of the analysis on top of
parsing; a third measurement runs static detection with its process pool as ``check`` does.

    python benchmarks/bench_static.py [--root DIR] [--paths models] [--limit N] [--jobs N]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from collections import Counter
from pathlib import Path

import libcst as cst

from graphmend.config import Config
from graphmend.detect import static
from graphmend.sources import SourceError, read_source


def _default_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("transformers is not installed; pass --root")
    return Path(list(spec.submodule_search_locations)[0])


def main(argv=None) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="tree to scan (default: the transformers package)")
    parser.add_argument("--paths", default="models", help="folder under the root (default: models)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N files (0: all)")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8), help="pool size for the third run")
    args = parser.parse_args(argv)
    root = (args.root or _default_root()).resolve()
    config = Config(root=root, paths=(args.paths,))
    files = static._all_files(config)
    if args.limit:
        files = files[: args.limit]
        config = Config(root=root, paths=tuple(files))
    texts = []
    for rel in files:
        try:
            text = read_source(root, rel)
        except SourceError:
            continue
        texts.append((rel, text))
    size_mb = sum(len(t.encode("utf-8")) for _, t in texts) / 1e6
    print(f"tree: {root}/{args.paths}: {len(files)} files, {size_mb:.1f} MB, python {sys.version.split()[0]}, "
          f"libcst {importlib.metadata.version('libcst')}, {os.cpu_count()} CPUs")

    def parse_all(items) -> float:
        t0 = time.perf_counter()
        for _, text in items:
            try:
                cst.parse_module(text)
            except cst.ParserSyntaxError:
                pass
        return time.perf_counter() - t0

    bare = parse_all(texts)
    # static detection skips files that never say "torch"; the parse of just those is the floor
    bare_torch = parse_all([(rel, text) for rel, text in texts if "torch" in text])

    t0 = time.perf_counter()
    serial = static.detect_static(config, jobs=1)
    serial_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    pooled = static.detect_static(config, jobs=args.jobs)
    pooled_s = time.perf_counter() - t0
    assert pooled == serial, "pool and serial runs disagree"

    cats = Counter(b.category.value for b in serial.breaks)
    print(f"bare libcst parse (serial):          {bare:8.2f} s")
    print(f"bare parse, files mentioning torch:  {bare_torch:8.2f} s   (static check / this, serial: "
          f"{serial_s / bare_torch:5.2f}x)")
    print(f"static check (serial, jobs=1):       {serial_s:8.2f} s   ratio vs bare parse: {serial_s / bare:5.2f}x")
    print(f"static check (pool, jobs={args.jobs}):         {pooled_s:8.2f} s   ratio vs bare parse: {pooled_s / bare:5.2f}x")
    print(f"files scanned {serial.files_scanned}, parsed {serial.files_parsed}, errors {len(serial.errors)}; "
          f"candidates {len(serial.breaks)}: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    fixable = Counter(b.rule for b in serial.breaks if b.rule)
    print("by rule: " + ", ".join(f"{k} {v}" for k, v in sorted(fixable.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
