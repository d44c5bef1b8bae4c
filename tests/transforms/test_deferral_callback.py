"""A deferred print followed, in the same compiled region, by code of another file.

``show.py`` (rewritten at the default safety, as ``graphmend fix`` does it) prints and then hands
its value to code the fix cannot read, supplied by the driver (another, unrewritten file): a
submodule given to the constructor, a function given to ``forward``. That code prints (its own
print is no record: its file is not rewritten) or raises. Under compile the deferred print waits
for the boundary while the other output comes out at once: a deferral there would print them in
the wrong order. A function handed in as an argument keeps the print as written; a submodule of
another file the instance holds keeps the order: the deferred print is made in the graph. Each shape must print what the original prints, in its order, with the same
values and exceptions, eagerly and compiled (backends eager and aot_eager).
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from tests.transforms._side_effect_support import run_driver  # noqa: E402

SHOW = '''import torch


class Report(torch.nn.Module):
    def __init__(self, post):
        super().__init__()
        self.post = post

    def forward(self, x):
        print("report", float(x.sum()))
        return self.post(x) + 1


class Hand(torch.nn.Module):
    def forward(self, x, fn):
        print("hand", float(x.sum()))
        return fn(x) + 1


class Plain(torch.nn.Module):
    """Control: nothing after its print runs code of another file, nor may fail while Dynamo traces
    it (a Linear may: a print of a value before it is left as written)."""

    def forward(self, x):
        print("plain", float(x.sum()))
        return x.sin() * 2
'''

DRIVE = textwrap.dedent('''
    import contextlib, io, json, sys
    import torch
    import torch._dynamo
    sys.path.insert(0, sys.argv[1])
    import show


    class Post(torch.nn.Module):
        def forward(self, x):
            print("post", float(x.sum()))
            return x * 2


    def fn(x):
        if (x < 0).any():
            raise ValueError("negative in fn")
        print("fn", float(x.sum()))
        return x * 3


    SHAPES = {
        "submodule-of-another-file": lambda: (show.Report(Post()), ()),
        "function-argument": lambda: (show.Hand(), (fn,)),
        "own-code": lambda: (show.Plain(), ()),
    }
    INPUTS = ([2.0], [-1.0], [3.0])

    result = {}
    for name in sys.argv[2].split(","):
        for mode in ("eager", "compiled-eager", "compiled-aot_eager"):
            torch._dynamo.reset()
            torch.manual_seed(0)
            module, extra = SHAPES[name]()
            call = module if mode == "eager" else torch.compile(module, backend=mode.split("-", 1)[1])
            seen = []
            for values in INPUTS:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    try:
                        with torch.no_grad():
                            got = ["value", call(torch.tensor(values), *extra).tolist()]
                    except Exception as exc:
                        got = ["raise", type(exc).__name__, str(exc)]
                seen.append([got, out.getvalue()])
            result[name + "/" + mode] = seen
    print(json.dumps(result))
''')

SHAPES = ("submodule-of-another-file", "function-argument", "own-code")
MODES = ("eager", "compiled-eager", "compiled-aot_eager")


def _run(folder):
    return run_driver(DRIVE, str(folder), ",".join(SHAPES), timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("deferral-callback")
    original, fixed = root / "original", root / "fixed"
    original.mkdir()
    fixed.mkdir()
    (original / "show.py").write_text(SHOW)
    text = fix_text("show.py", SHOW, RuleContext(file="show.py", device="cpu")).text
    (fixed / "show.py").write_text(text)
    return _run(original), _run(fixed), text


def test_a_print_a_handed_in_function_follows_is_not_deferred(runs):
    text = runs[2]
    assert '_graphmend_deferred(print, "call")("plain"' in text
    assert 'print("hand"' in text and '_graphmend_deferred(print, "call")("hand"' not in text


# What ``self.post`` holds is not judged for deferral (judging every such call would leave most
# deferrals of real models unsafe: ``self.embed_tokens(ids)`` follows their warnings); a print is
# made in the graph (the runtime's ordered effectful op), before the graph break its output makes.
CASES = [pytest.param(shape, mode) for shape in SHAPES for mode in MODES]


@pytest.mark.parametrize(("shape", "mode"), CASES)
def test_each_shape_prints_and_fails_as_the_original(runs, shape, mode):
    original, fixed, _ = runs
    key = f"{shape}/{mode}"
    assert all(step[1] for step in original[key]), "every call prints"
    assert fixed[key] == original[key]
