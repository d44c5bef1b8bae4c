"""Static candidates agree with what real Dynamo (torch 2.13, CPU, eager backend) reports.

The same file is read by static detection and run under ``torch.compile`` with Dynamo's own
``graph_breaks`` log; every fixable site must be a break Dynamo reports at the same line with
the same GB id, and Dynamo must report no break in this file that static detection missed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from graphmend.config import Config
from graphmend.detect.static import detect_static

CASES = textwrap.dedent('''\
    import logging
    import warnings

    import torch

    logger = logging.getLogger("cases")


    def branch(x):
        if x.sum() > 0:
            return x + 1
        return x - 1


    def validation(x):
        if torch.isinf(x).any():
            raise ValueError("inf")
        return x + 1


    def debug_print(x):
        print("value", x.shape)
        return x + 1


    def log_warning(x):
        logger.warning("careful")
        return x + 1


    def warn(x):
        warnings.warn("careful")
        return x + 1


    def scalar(x):
        if x.sum().item() > 0:
            return x + 1
        return x


    def scalar_traced(x):
        n = x.max().item()
        if n > 0:
            return x + n
        return x


    def choose(x):
        return x + 1 if x.max() > 0 else x - 1


    def clean(x):
        if x.shape[0] > 1 and x.dtype == torch.float32:
            return torch.where(x > 0, x, -x)
        return x


    COMPILED = [
        torch.compile(branch, backend="eager"),
        torch.compile(validation, backend="eager"),
        torch.compile(debug_print, backend="eager"),
        torch.compile(log_warning, backend="eager"),
        torch.compile(warn, backend="eager"),
        torch.compile(scalar, backend="eager"),
        torch.compile(scalar_traced, backend="eager"),
        torch.compile(choose, backend="eager"),
        torch.compile(clean, backend="eager"),
    ]
''')

RUNNER = textwrap.dedent('''\
    import logging, sys, warnings
    warnings.simplefilter("ignore")
    logging.getLogger("cases").addHandler(logging.NullHandler())
    logging.getLogger("cases").propagate = False
    sys.path.insert(0, sys.argv[1])
    import torch
    import cases
    for fn in cases.COMPILED:
        torch._dynamo.reset()
        fn(torch.ones(3))
''')


def _dynamo_breaks(root) -> set[tuple[int, str]]:
    env = dict(os.environ, TORCH_LOGS="graph_breaks", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(root)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: set[tuple[int, str]] = set()
    where = None
    for line in proc.stderr.splitlines():
        m = re.search(r"Graph break in user code at (.+):(\d+)$", line)
        if m:
            where = int(m.group(2)) if m.group(1).endswith("cases.py") else None
            continue
        m = re.search(r"/gb/(gb\d{4})\.html", line)
        if m and where is not None:
            found.add((where, m.group(1).upper()))
            where = None
    return found


def test_static_candidates_match_dynamo_graph_breaks(tmp_path):
    (tmp_path / "cases.py").write_text(CASES)
    static = detect_static(Config(root=tmp_path.resolve()))
    assert static.errors == ()
    predicted = {(b.line, b.gb_id) for b in static.breaks}
    observed = _dynamo_breaks(tmp_path)
    # eight constructs, one break each; `clean` compiles to one graph
    assert len(predicted) == 8
    assert predicted == observed
