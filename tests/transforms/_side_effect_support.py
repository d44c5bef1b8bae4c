"""Helpers for the GM2xx/GM3xx tests: fix a program with the real rules, import it, count graphs."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from graphmend.model import Safety
from graphmend.transforms.base import RuleContext
from graphmend.transforms.engine import fix_text
from graphmend.transforms.registry import all_rules

_counter = itertools.count()


def fix_program(text: str, *, codes=("GM2", "GM3"), threshold: Safety = Safety.UNSAFE, path: str = "prog.py"):
    """Run the selected rules in static mode (several rounds) and return the FileResult."""
    rules = [r for r in all_rules() if r.code.startswith(tuple(codes))]
    return fix_text(path, text, RuleContext(file=path, threshold=threshold), rules, rounds=4)


def load_module(tmp_path: Path, text: str, stem: str = "prog"):
    """Write ``text`` to a fresh file and import it under a unique name."""
    name = f"{stem}_{next(_counter)}"
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class GraphCounter:
    """A torch.compile backend that counts the graphs it is given (and runs them as they are)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@contextlib.contextmanager
def captured_logger(name: str, handler: logging.Handler):
    """The records of logger ``name`` at every level go to ``handler`` alone (not propagated to the
    root's handlers) while the block runs; the logger's handlers are as they were afterwards."""
    log = logging.getLogger(name)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        yield log
    finally:
        log.removeHandler(handler)


def compiled_output(module, calls, logger: str) -> str:
    """What ``module.M()`` compiled (backend ``eager``) prints, and the records of ``logger``, over
    ``calls``: a call that raises shows its exception's type name where it raised."""
    import contextlib
    import io
    import logging

    import torch

    reset_dynamo()
    torch.manual_seed(0)
    model = torch.compile(module.M(), backend="eager")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger(logger).addHandler(handler)
    try:
        with contextlib.redirect_stdout(out):
            for args in calls:
                try:
                    model(*args)
                except Exception as error:  # noqa: BLE001 - compared
                    print(type(error).__name__)
    finally:
        logging.getLogger(logger).removeHandler(handler)
    return out.getvalue()


def graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def reset_dynamo() -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


# The start of a differential runner script run in a fresh interpreter (``python -c``): ``load``
# imports a program file under a name, ``Count`` is a backend that counts the graphs it compiles.
RUNNER_PRELUDE = textwrap.dedent('''
    import importlib.util, json, sys
    import torch

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    class Count:
        def __init__(self, backend):
            self.graphs, self.backend = 0, backend
        def __call__(self, gm, inputs):
            self.graphs += 1
            return gm.forward if self.backend == "eager" else torch._dynamo.backends.debugging.aot_eager(gm, inputs)

''')


def run_driver(drive: str, *args: str, timeout: int = 600):
    """Run the driver program ``drive`` (``python -c``) with ``args``, one thread, in a fresh
    interpreter; return the JSON it prints on its last line."""
    proc = subprocess.run([sys.executable, "-c", drive, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
