"""Attacks on a deferred call given a tensor that requires grad (made at a graph break, after the
calls recorded before it in the region, with the original's location): original vs fixed, compiled with
the same backend, on stdout, log records and warnings (with their locations), in order. Each
confirmed difference is a strict expected failure naming it."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _side_effect_support import fix_program, load_module, reset_dynamo  # noqa: E402

HEAD = '''import collections
import logging
import warnings

import torch

log = logging.getLogger("grad_redteam")
Pair = collections.namedtuple("Pair", "a b")


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.emb = torch.nn.Embedding(4, 2)

    def forward(self, x, idx):
        y = x * self.w
'''


def _program(body: str) -> str:
    return HEAD + "".join(f"        {line}\n" for line in body.strip().splitlines())


def _events(model, calls=2, rule="always"):
    """What the calls show, in order: text written to stdout, log records and warnings (with the
    file and line they name), the result or the exception."""
    events = []

    def site(path):  # each program is imported under its own name: prog_N.py
        return re.sub(r"_\d+\.py$", ".py", Path(path).name)

    class Keep(logging.Handler):
        def emit(self, record):
            events.append(("log", record.getMessage(), site(record.pathname), record.lineno))

    class Out(io.StringIO):
        def write(self, text):
            if text:
                events.append(("out", text))
            return len(text)

    def show(message, category, filename, lineno, file=None, line=None):
        if "Dynamo" not in str(message):
            events.append(("warn", category.__name__, str(message), site(filename), lineno))

    root, handler, level = logging.getLogger(), Keep(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        for call in range(calls):
            with contextlib.redirect_stdout(Out()), warnings.catch_warnings():
                warnings.simplefilter(rule)
                warnings.showwarning = show
                try:
                    result = model(torch.tensor([1.0, 2.0]), torch.tensor([1, 9 if call else 2]))
                    result.backward()
                    events.append(("ret", repr(result)))
                except Exception as exc:  # the program's own failure, compared like output
                    events.append(("exc", type(exc).__name__, str(exc).splitlines()[0]))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return events


def _compare(tmp_path, body, backend="eager", sites=None, rule="always"):
    source = _program(body)
    result = fix_program(source)
    if sites is not None:
        assert result.text.count("_graphmend_deferred(") == sites, result.text
    reset_dynamo()
    torch.manual_seed(0)
    expected = _events(torch.compile(load_module(tmp_path, source).M(), backend=backend), rule=rule)
    reset_dynamo()
    torch.manual_seed(0)
    got = _events(torch.compile(load_module(tmp_path, result.text).M(), backend=backend), rule=rule)
    return expected, got


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_print_after_a_logger_record_keeps_its_grad_fn(tmp_path, backend):
    expected, got = _compare(tmp_path, '''
log.warning("first %s", x.sum())
print("y", y)
return y.sum()''', backend, sites=2)
    assert any("grad_fn=" in e[1] for e in expected if e[0] == "out")
    assert got == expected


def test_a_warning_and_a_record_of_a_grad_tensor_name_the_call_site(tmp_path):
    expected, got = _compare(tmp_path, '''
warnings.warn(y)
logging.warning("y %s", y)
return y.sum()''', sites=2)
    assert [e[0] for e in expected[:2]] == ["warn", "log"] and expected[0][-1] == len(HEAD.splitlines()) + 1
    assert got == expected


def test_two_warn_sites_under_the_default_filter_are_both_shown(tmp_path):
    expected, got = _compare(tmp_path, '''
warnings.warn(y)
warnings.warn(y)
return y.sum()''', rule="default")
    assert [e[0] for e in expected].count("warn") == 4
    assert got == expected


def test_a_dtype_before_a_grad_tensor_keeps_its_grad_fn(tmp_path):
    expected, got = _compare(tmp_path, '''
print("y", x.dtype, y)
print([y], {"k": y})
return y.sum()''', sites=2)
    assert sum("grad_fn=" in e[1] for e in expected if e[0] == "out") == 6
    assert got == expected


def test_a_namedtuple_holding_a_grad_tensor_keeps_its_grad_fn(tmp_path):
    expected, got = _compare(tmp_path, '''
print("p", Pair(y, 1))
return y.sum()''', sites=1)
    assert any("Pair(a=tensor([1., 2.], grad_fn=" in e[1] for e in expected if e[0] == "out")
    assert got == expected


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_grad_print_then_deferred_calls_then_a_failing_lookup_keep_their_order(tmp_path, backend):
    """Held: the print made at the graph break, then the in-graph calls before an out-of-range
    embedding lookup fails, come out as the original's, and the exception is the same."""
    expected, got = _compare(tmp_path, '''
print("y", y)
print("after", x.sum())
warnings.warn("w")
z = self.emb(idx)
print("z", z.shape)
return y.sum() + z.sum()''', backend, sites=4)
    assert expected[-1][:2] == ("exc", "IndexError") and ("warn", "UserWarning", "w") in [e[:3] for e in expected]
    assert got == expected


def test_grad_mode_switching_between_calls_prints_as_the_original(tmp_path):
    """Held: grad, no_grad, grad, inference_mode, grad: each call's print shows (or not) grad_fn
    as the original's does (Dynamo recompiles on the grad mode)."""
    source = _program('''
print("y", y)
return y''')
    fixed = fix_program(source).text

    def run(model):
        out = io.StringIO()
        for mode in (contextlib.nullcontext, torch.no_grad, contextlib.nullcontext, torch.inference_mode,
                     contextlib.nullcontext):
            with contextlib.redirect_stdout(out), mode():
                model(torch.tensor([1.0, 2.0]), torch.tensor([1]))
        return out.getvalue()

    reset_dynamo()
    expected = run(torch.compile(load_module(tmp_path, source).M(), backend="eager"))
    assert expected.count("grad_fn=") == 3
    reset_dynamo()
    assert run(torch.compile(load_module(tmp_path, fixed).M(), backend="eager")) == expected


def test_a_warning_of_a_grad_tensor_under_the_error_filter_raises_as_the_original(tmp_path):
    """Was: Dynamo traced the call the graph break ended as a frame of its own, and its look at the
    non-leaf's .grad warned (an error under the filter). That call now runs eagerly."""
    expected, got = _compare(tmp_path, '''
warnings.warn(y)
return y.sum()''', sites=1, rule="error")
    assert [e[:2] for e in expected] == [("exc", "UserWarning")] * 2
    assert got == expected
