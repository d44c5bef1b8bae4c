"""The runtime and helpers a GM2xx/GM3xx fix appends at the END of a file are defined only once
the module has run to its last line: code that runs this file's functions while the module is
still executing (an ``if __name__ == "__main__":`` block, ``main()`` at module level) would meet
NameError where the original ran. Such files are declined, with the line and why.

Real rules, real files run as scripts (``runpy``, as ``python script.py`` runs them).
"""

from __future__ import annotations

import contextlib
import io
import runpy

import pytest

torch = pytest.importorskip("torch")

from graphmend.model import Decline, Safety  # noqa: E402
from tests.transforms._side_effect_support import fix_program  # noqa: E402

MODEL = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("sum", y.sum())
        if (y < 0).any():
            raise ValueError("negative")
        return y + 1
'''

MAIN = '''

def main():
    m = torch.compile(M(), backend="eager")
    print(m(torch.ones(2)))
'''


def _run(tmp_path, text):
    path = tmp_path / "script.py"
    path.write_text(text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name="__main__")
    return out.getvalue()


@pytest.mark.parametrize("tail,line", [
    ('\n\nif __name__ == "__main__":\n    main()\n', 18),
    ("\n\nmain()\n", 18),
    ("\n\nRESULT = M()(torch.ones(2))\n", 18),
])
def test_a_file_that_runs_its_code_at_import_is_declined(tmp_path, tail, line):
    program = MODEL + MAIN + tail
    torch._dynamo.reset()
    expected = _run(tmp_path, program)
    result = fix_program(program, threshold=Safety.SAFE)
    assert result.text == program, "nothing appended after code that runs at import"
    assert not result.applied
    reasons = [d.reason for d in result.declined if isinstance(d, Decline)]
    assert reasons and all(f"at line {line}" in r and "NameError" in r for r in reasons), reasons
    torch._dynamo.reset()
    assert _run(tmp_path, result.text) == expected


def test_a_file_whose_module_level_code_runs_nothing_of_it_is_still_fixed(tmp_path):
    program = MODEL + "\n\nlogger_name = __name__.upper()\nSIZES = dict(a=1)\n"
    result = fix_program(program, threshold=Safety.SAFE)
    assert {f.rule for f in result.applied} >= {"GM301"}


def test_a_module_of_a_repository_whose_root_is_a_package_gets_the_runtime_inline(tmp_path, monkeypatch):
    """`from ._graphmend_runtime import ...` in a module at the root of a repository that has an
    `__init__.py` there: imported from the root as a top-level module (how its scripts, tests and
    targets import it), the relative import fails with ImportError."""
    import importlib
    import sys

    from graphmend.transforms import _runtime_copy as RC
    from graphmend.transforms.base import RuleContext
    from graphmend.transforms.engine import fix_text
    from graphmend.transforms.registry import all_rules

    (tmp_path / "__init__.py").write_text("")
    program = MODEL.replace('        if (y < 0).any():\n            raise ValueError("negative")\n', "")
    (tmp_path / "rootmod.py").write_text(program)
    rules = [r for r in all_rules() if r.code.startswith("GM2")]
    ctx = RuleContext(file="rootmod.py", threshold=Safety.SAFE, runtime=RC.locate(tmp_path, "rootmod.py"))
    result = fix_text("rootmod.py", program, ctx, rules, rounds=4)
    assert [f.rule for f in result.applied] == ["GM201"] and not [f for f in result.applied if f.files]
    (tmp_path / "rootmod.py").write_text(result.text)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("rootmod")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            module.M()(torch.ones(2))
        assert out.getvalue() == "sum tensor(4.)\n"
    finally:
        sys.modules.pop("rootmod", None)


@pytest.mark.parametrize("tail, fixed", [
    # transformers' modeling_utils.py formats a docstring at module level (of a method, here the class's)
    ('\n\nif M.__doc__ is not None:\n    M.__doc__ = M.__doc__.format(x="y")\n', True),
    ('\n\nNOTE = str(M.__doc__).format(M()(torch.ones(2)))\n', False),
])
def test_a_method_of_a_docstring_runs_nothing_of_the_file_but_its_arguments_may(tmp_path, tail, fixed):
    program = MODEL + tail
    torch._dynamo.reset()
    expected = _run(tmp_path, program)
    result = fix_program(program, threshold=Safety.SAFE)
    assert bool(result.applied) is fixed, [d.reason for d in result.declined if isinstance(d, Decline)]
    torch._dynamo.reset()
    assert _run(tmp_path, result.text) == expected


PRINTS = '''import torch


class M(torch.nn.Module):
    def forward(self, x):
        print("sum", x.shape)
        return x + 1


class Registry:
    def __init__(self):
        self.items = {}

    def build(self):
        return {build}


def register(cls):
    return cls
'''


@pytest.mark.parametrize("build, tail, fixed", [
    # transformers' modeling_utils.py: `ALL_ATTENTION_FUNCTIONS = AttentionInterface()`
    ("dict(self.items)", "\n\nREGISTRY = Registry()\n", True),
    ("M()", "\n\nREGISTRY = Registry()\nREGISTRY.build()(torch.ones(2))\n", False),  # names the class: may run it
    ("dict(self.items)", "\n\nKEPT = register(M)\n", False),  # the class handed to a function of the file
])
def test_code_at_import_that_never_names_the_class_of_a_deferred_call_does_not_keep_it(tmp_path, build, tail, fixed):
    program = PRINTS.replace("{build}", build) + tail
    torch._dynamo.reset()
    expected = _run(tmp_path, program)
    result = fix_program(program, threshold=Safety.SAFE)
    assert [f.rule for f in result.applied] == (["GM201"] if fixed else []), \
        [d.reason for d in result.declined if isinstance(d, Decline)]
    torch._dynamo.reset()
    assert _run(tmp_path, result.text) == expected
