"""A deferred call followed by code that fails while Dynamo TRACES it (issue 18).

A tensor operation whose shapes or dtypes do not fit (``y + mask`` of another length, a ``Linear``
given the wrong width, ``y.view(7)``, ``y[5]``) fails in the fake-tensor trace: the graph is never
built, so nothing in it runs, neither a record nor the in-graph op ``graphmend::deferred``. The
original's output call broke the graph before that code, so it made its output, then failed. The
runtime makes the op's calls of a failed trace before the error when their arguments hold no tensor
(``tests/transforms/test_runtime_trace_faults.py``); the rules leave the others as written.
(A Python-level error while tracing, a ``KeyError`` or an ``AttributeError``, makes Dynamo run the
frame eagerly, where the deferred call is the original call: that one is kept.)

The mixin-in-another-file programs mirror layoutlmv3/bros/flava: ``a.py`` holds a base class whose
method warns and logs (``ModuleUtilsMixin.get_extended_attention_mask``), ``b.py`` the model whose
``forward`` calls it. Each runs original and fixed, uncompiled, eager and aot_eager, on calls that
pass and calls that fail, under the warnings filters "always", "error" and "once".
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import libcst as cst
import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Frame, Safety  # noqa: E402
from graphmend.transforms._deferral_entries import TRACE_SAFE_CALLS, TRACE_SAFE_FUNCTIONS  # noqa: E402
from graphmend.transforms.base import RuleContext, iter_nodes  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import captured_logger, compiled_output, load_module, reset_dynamo  # noqa: E402
from tests.transforms.test_deferral_cross_file import A, Events, _package, fix_package, load  # noqa: E402

DTYPES = (torch.bool, torch.uint8, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.complex64)
SHAPES = ((), (0,), (2, 3), (1, 0, 2))


def test_every_vetted_call_and_number_operator_traces_on_any_shape_and_dtype():
    """What ``_trace_fault`` lets pass must not fail on fake tensors (what Dynamo traces with) nor
    on real ones, whatever the tensor is; and the operators it refuses do fail on some."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    ops = {f".{n}()": (lambda n: lambda t: getattr(t, n)())(n) for n in TRACE_SAFE_CALLS}
    ops.update({f"torch.{n}(t)": (lambda n: lambda t: getattr(torch, n)(t))(n) for n in TRACE_SAFE_FUNCTIONS})
    ops.update({"t + 1": lambda t: t + 1, "2 * t": lambda t: 2 * t, "t / -2.5": lambda t: t / -2.5,
                "t == 1": lambda t: t == 1, "t != 0.5": lambda t: t != 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex to float: a warning, not a failure
        for (name, op), dtype, shape in itertools.product(ops.items(), DTYPES, SHAPES):
            op(torch.zeros(shape, dtype=dtype))
            with FakeTensorMode():
                op(torch.zeros(shape, dtype=dtype))
        with pytest.raises(RuntimeError):
            torch.zeros(2, dtype=torch.bool) - 1  # why `-` is not a number operator (it fails in the graph)
        with FakeTensorMode(), pytest.raises(Exception):
            torch.zeros(2) + torch.zeros(3)  # two tensors: broadcasting may fail


# b.py: the model of another file calling the base-class method (a.py line 11 warns, 12 logs).
B_TEMPLATE = '''import torch

from .a import Base


class Model(Base):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)

    def forward(self, x, m):
        {body}
'''
STACKS = {"pkg/a.py": ((11, (Frame("pkg/b.py", 12, "forward"), Frame("pkg/a.py", 11, "helper"))),
                       (12, (Frame("pkg/b.py", 12, "forward"), Frame("pkg/a.py", 12, "helper"))))}

TRACE_FAULTS = [
    "y = self.helper(x) + m\n        return y",
    "y = self.helper(x)\n        return self.proj(y)",
    "y = self.helper(x)\n        return y.view(7)",
    "y = self.helper(x)\n        return y[0]",
    "y = self.helper(x)\n        return torch.cat([y, m])",
    "y = self.helper(x)\n        return y - 1",
]


# a.py with its logger made by a helper of the package that the rules cannot show to return what
# logging.getLogger returns (a logger of its own, made directly): the runtime cannot name it either
UNNAMED = {"pkg/logs.py": 'import logging\n\n\ndef get_logger(name):\n    logger = logging.Logger(name)\n'
                          '    logger.parent = logging.getLogger(name)  # its records reach the handlers of "gmx"\n'
                          '    return logger\n'}
A_UNNAMED = A.replace("import torch\n", "import torch\n\nfrom .logs import get_logger\n", 1).replace(
    'logger = logging.getLogger("gmx")', 'logger = get_logger("gmx")')
UNNAMED_STACKS = {"pkg/a.py": tuple((line + 2, frames[:-1] + (Frame("pkg/a.py", line + 2, "helper"),))
                                    for line, frames in STACKS["pkg/a.py"])}


@pytest.mark.parametrize("body", TRACE_FAULTS, ids=["broadcast", "linear", "view", "subscript", "cat", "minus"])
def test_code_after_the_call_that_may_fail_while_tracing_keeps_the_warning_and_the_logger_call(tmp_path, body):
    """The warning of constants and the method of the logger logging.getLogger returns are made by
    the runtime when the trace after them fails (fixed, safe), each once per call."""
    orig, fixed = _package(tmp_path, b=B_TEMPLATE.format(body=body))
    applied, skipped = fix_package(fixed, STACKS, rounds=1)
    assert sorted((f.rule, f.safety) for f in applied) == [("GM202", Safety.SAFE), ("GM203", Safety.SAFE)]
    x = torch.arange(3.0)
    inputs = [(x, torch.ones(3)), (torch.ones(4), torch.ones(4)), (torch.tensor(1.0), torch.ones(1)),
              (torch.ones(3, dtype=torch.bool), torch.ones(3, 3)), (x, torch.ones(3))]
    for backend, (events, outcomes) in _differential(orig, fixed, inputs, "always"):
        assert [e[0] for e in events] == ["warn", "log"] * len(inputs), backend


@pytest.mark.parametrize("body", TRACE_FAULTS[:2], ids=["broadcast", "linear"])
def test_code_after_the_call_that_may_fail_while_tracing_leaves_a_logger_the_runtime_cannot_name(tmp_path, body):
    """A logger the rules cannot show to be one logging.getLogger returns (made by a helper that
    builds its own): the runtime would record its call (it cannot name the logger), which a failed
    trace loses, so the call is left as written, with the reason. Its graph break then ends the
    graph that makes the warning, before the trace that fails."""
    orig, fixed = _package(tmp_path, a=A_UNNAMED, b=B_TEMPLATE.format(body=body))
    for root in (orig, fixed):
        (root / "pkg/logs.py").write_text(UNNAMED["pkg/logs.py"])
    applied, skipped = fix_package(fixed, UNNAMED_STACKS, rounds=1)
    assert [(f.rule, f.safety) for f in applied] == [("GM203", Safety.SAFE)]
    assert [s.fix.rule for s in skipped] == ["GM202"] and skipped[0].fix.safety is Safety.UNSAFE
    assert "may fail while Dynamo traces it" in skipped[0].fix.notes, skipped[0].fix.notes
    x = torch.arange(3.0)
    inputs = [(x, torch.ones(3)), (torch.ones(4), torch.ones(4)), (x, torch.ones(3))]
    for backend, (events, outcomes) in _differential(orig, fixed, inputs, "always"):
        assert [e[0] for e in events] == ["warn", "log"] * len(inputs), backend


def _observe(call, inputs, action):
    """Warnings (category, message, file, line), log records and printed text in one ordered list,
    and each call's value or exception, under the warnings filter ``action``."""
    events = Events()
    with captured_logger("gmx", events):
        outcomes = events.calls(call, inputs, action)
    return events.seen, outcomes


def _differential(orig: Path, fixed: Path, inputs, action: str, backends=("uncompiled", "eager", "aot_eager"),
                  reference: str = ""):
    """(backend, what the original showed) for each backend, after checking that the fixed program
    showed the same; the original runs uncompiled when ``reference`` says so."""
    for backend in backends:
        results = []
        for root, how in ((orig, reference or backend), (fixed, backend)):
            module = load(root, "pkg.b")
            # "once" remembers a message in warnings' own registry: forgotten between the two
            # programs, as in two fresh processes
            warnings.onceregistry.clear()
            reset_dynamo()
            torch.manual_seed(0)
            model = module.Model()
            if how != "uncompiled":
                model = torch.compile(model, backend=how)
            results.append(_observe(model, inputs, action))
        assert results[1] == results[0], (backend, action)
        yield backend, results[0]


def test_a_broadcast_that_fails_while_tracing_after_the_call_keeps_the_warning_and_the_record(tmp_path):
    """Fixed at `safe` before this check, the warning and the log record were lost on the call whose
    mask has another length (the fake-tensor trace of the `+` failed before the graph ran)."""
    orig, fixed = _package(tmp_path, b=B_TEMPLATE.format(body="y = self.helper(x) + m\n        return y"))
    fix_package(fixed, STACKS)
    x = torch.arange(3.0)
    inputs = [(x, torch.ones(3)), (x, torch.ones(4)), (x, torch.ones(3))]
    for backend, (events, outcomes) in _differential(orig, fixed, inputs, "always"):
        assert [o[0] for o in outcomes] == ["value", "raised", "value"], backend
        assert [e[0] for e in events] == ["warn", "log"] * 3, backend  # the failing call's came out too


# A base class whose method is fixed (what follows the call in every frame is vetted), a forward
# that checks its input before the call (an explicit raise: a call that fails before the output)
# and reads an attribute after it that may be missing (a Python-level error while tracing: Dynamo
# runs the frame eagerly, the deferred call as written).
SAFE_B = '''import torch

from .a import Base


class Model(Base):
    def forward(self, x, name):
        if x.dim() != 1:
            raise ValueError("expected a 1-d input")
        y = self.helper(x) * 2
        getattr(self, name)
        return torch.sigmoid(y) + 1
'''
SAFE_STACKS = {"pkg/a.py": ((11, (Frame("pkg/b.py", 10, "forward"), Frame("pkg/a.py", 11, "helper"))),
                            (12, (Frame("pkg/b.py", 10, "forward"), Frame("pkg/a.py", 12, "helper"))))}


@pytest.mark.parametrize("action", ["always", "error", "once"])
def test_a_mixin_of_another_file_fixed_behaves_as_the_original_under_each_warnings_filter(tmp_path, action):
    """Under "once" the reference is the original run uncompiled, on calls that compile nothing new
    after the first: "once" is kept in the registry of the module that warned, which Python clears
    whenever the warnings filters change, and compiling changes them (torch 2.13). The original,
    compiled, breaks the graph at the warning and compiles the code after it once the warning was
    shown, so it shows it again on the next call (observed with backend eager); the fixed program
    compiles the whole forward before the warning is made in the graph and shows it once, as Python
    does. A recompilation after the warning re-arms it in both programs."""
    orig, fixed = _package(tmp_path, b=SAFE_B)
    applied, _ = fix_package(fixed, SAFE_STACKS)
    assert sorted(f.rule for f in applied) == ["GM202", "GM203"] and all(f.safety is Safety.SAFE for f in applied)
    x = torch.arange(3.0)
    inputs = [(x, "training"), (x, "missing"), (torch.ones(2, 2), "training"), (x, "training")]
    if action == "once":
        inputs = [(x, "training")] * 3
    reference = "uncompiled" if action == "once" else ""
    for backend, (events, outcomes) in _differential(orig, fixed, inputs, action, reference=reference):
        kinds = [o[0] if o[0] == "value" else o[1] for o in outcomes]
        if action == "error":  # the warning raises at the call, every time; nothing after it runs
            assert kinds == ["FutureWarning", "FutureWarning", "ValueError", "FutureWarning"], backend
            assert events == [], backend
        elif action == "once":
            assert kinds == ["value"] * 3 and [e[0] for e in events] == ["warn", "log", "log", "log"], backend
        else:
            assert kinds == ["value", "AttributeError", "ValueError", "value"], backend
            warns = [e for e in events if e[0] == "warn"]
            assert warns[0] == ("warn", "careful", "FutureWarning", "a.py", 11), backend
            assert len(warns) == 3, backend
            assert [e[0] for e in events if e[0] == "log"] == ["log"] * 3, backend
    # fewer graph breaks: one graph for a call that passes
    graphs = []
    reset_dynamo()
    model = torch.compile(load(fixed, "pkg.b").Model(), backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    _observe(model, [(x, "training")], "ignore")
    assert len(graphs) == 1


# The same-file rule (GM201 in a module class that defines `forward`) defers a print before a
# Linear given the wrong width, or before an index held in a Python int: the trace fails and the
# print made in the graph never runs.
SAME_FILE = '''import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 2)

    def forward(self, x, i: int):
        print("projecting", x.shape)
        return {after}
'''
SAME_FILE_CALLS = {"linear": ("self.proj(x)", ((torch.ones(1, 4), 0), (torch.ones(1, 3), 0))),
                   "int-index": ("x[i]", ((torch.ones(4), 1), (torch.ones(4), 5)))}


def _shown(module, calls) -> str:
    return compiled_output(module, calls, "gm_traced")


def _same_file_case(tmp_path, program: str, case: str):
    """``program`` with the case's code after the print, fixed; the original shows both calls' text."""
    after, calls = SAME_FILE_CALLS[case]
    text = program.format(after=after)
    result = fix_text("m.py", text, RuleContext(file="m.py", device="cpu"))
    want = _shown(load_module(tmp_path, text), calls)
    assert want.count("projecting") == 2
    return result, calls, want


@pytest.mark.parametrize("case", sorted(SAME_FILE_CALLS))
def test_same_file_print_before_an_error_found_while_tracing(tmp_path, case):
    result, calls, want = _same_file_case(tmp_path, SAME_FILE, case)
    assert not result.applied or _shown(load_module(tmp_path, result.text), calls) == want


# A print of a tensor's value, or a Logger's record, made in the trace that fails cannot be made from
# it (the value is not known while tracing; a record is no op): lost, while the original showed it.
TENSOR_PRINT = SAME_FILE.replace('print("projecting", x.shape)', 'print("projecting", x.sum())')
LOGGED = SAME_FILE.replace("import torch\n", "import logging\n\nimport torch\n\nlog = logging.getLogger('gm_traced')\n", 1) \
    .replace('print("projecting", x.shape)', 'log.warning("projecting %s", 1)')


@pytest.mark.parametrize("case", sorted(SAME_FILE_CALLS))
def test_same_file_print_of_a_tensor_before_an_error_found_while_tracing_is_left_as_written(tmp_path, case):
    result, calls, want = _same_file_case(tmp_path, TENSOR_PRINT, case)
    assert not result.applied and [s.fix.safety for s in result.skipped] == [Safety.UNSAFE]
    assert "may fail while Dynamo traces it" in result.skipped[0].fix.notes
    assert _shown(load_module(tmp_path, result.text), calls) == want


@pytest.mark.parametrize("case", sorted(SAME_FILE_CALLS))
def test_same_file_logger_call_before_an_error_found_while_tracing(tmp_path, case):
    """The method of a logger logging.getLogger returns, given constants: made in the graph by the
    op, and from the failed trace by the boundary (fixed, safe)."""
    result, calls, want = _same_file_case(tmp_path, LOGGED, case)
    assert [(f.rule, f.safety) for f in result.applied] == [("GM202", Safety.SAFE)]
    assert _shown(load_module(tmp_path, result.text), calls) == want


TENSOR_LOGGED = LOGGED.replace('log.warning("projecting %s", 1)', 'log.warning("projecting %s", x.sum())')


@pytest.mark.parametrize("case", sorted(SAME_FILE_CALLS))
def test_same_file_logger_call_given_a_tensor_before_an_error_found_while_tracing_is_left_as_written(tmp_path, case):
    """Given a tensor (its value is not known while tracing), the logger's call is lost with a failed
    trace, as a print of a tensor is: left as written, with the reason."""
    result, calls, want = _same_file_case(tmp_path, TENSOR_LOGGED, case)
    assert not result.applied and [s.fix.safety for s in result.skipped] == [Safety.UNSAFE]
    assert "may fail while Dynamo traces it" in result.skipped[0].fix.notes
    assert _shown(load_module(tmp_path, result.text), calls) == want


NAMED = {  # how the logger is bound at module level -> whether the rules show the runtime names it
    'import logging\nlog = logging.getLogger(__name__)\n': True,
    'import logging as lg\nlog = lg.getLogger("x")\n': True,
    'from logging import getLogger\nlog = getLogger(__name__)\n': True,
    'from transformers.utils import logging\nlog = logging.get_logger(__name__)\n': True,
    'from transformers.utils.logging import get_logger\nlog = get_logger(__name__)\n': True,
    'from pkg.logs import get_logger\nlog = get_logger(__name__)\n': True,  # returns logging.getLogger(name)
    'from .logs import get_logger\nlog = get_logger(__name__)\n': True,
    'from . import logs\nlog = logs.get_logger(__name__)\n': True,
    'from pkg.logs import make_logger as get_logger\nlog = get_logger(__name__)\n': False,  # returns Logger(name)
    'from elsewhere import get_logger\nlog = get_logger(__name__)\n': False,  # not in the repository
    'import logging\nlog = logging.getLogger(__name__)\nlog = logging.getLogger("y")\n': False,  # bound twice
    'import logging\nlog = logging.LoggerAdapter(logging.getLogger(__name__), {})\n': False,
}
LOGS = ('import logging\n\n\ndef get_logger(name=None):\n    if name is None:\n        name = "pkg"\n'
        '    return logging.getLogger(name)\n\n\ndef make_logger(name):\n    return logging.Logger(name)\n')


@pytest.mark.parametrize("binding", sorted(NAMED))
def test_the_rules_name_a_logger_only_when_logging_getlogger_returns_it(tmp_path, binding):
    from graphmend.transforms.base import SourceFile
    from graphmend.transforms.logging_in_compiled_region import named_logger

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/logs.py").write_text(LOGS)
    source = SourceFile("pkg/m.py", binding + "\n\ndef f():\n    log.warning('x')\n")
    call = next(n for n in iter_nodes(source.module, (cst.Call,)) if source.code(n.func) == "log.warning")
    assert named_logger(source, call, str(tmp_path)) is NAMED[binding]
    assert not named_logger(source, call) or "pkg" not in binding and "logs" not in binding  # no root: no helper read
