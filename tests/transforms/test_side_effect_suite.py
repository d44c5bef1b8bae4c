"""Must-decline / must-lower programs for GM201-GM203 and GM301 (static mode, unsafe allowed).

Each case names the expected outcome: ``lower`` with the rule and the safety the fix must carry,
or ``decline`` with the rule and a piece of the reason the user reads. A case whose expectation
is wrong in either direction fails: a decline that became a fix is a soundness bug, a fix that
became a decline a lost opportunity.
"""

from __future__ import annotations

import textwrap

import pytest

from graphmend.model import Decline, Fix, Safety
from graphmend.transforms.base import RuleContext, SourceFile
from graphmend.transforms.engine import run_rules
from graphmend.transforms.registry import all_rules

HEAD = "import logging\nimport sys\nimport warnings\n\nimport torch\n\nlogger = logging.getLogger(__name__)\n\n\n"


def module(body: str) -> str:
    """A module class whose forward holds ``body``."""
    return HEAD + "class M(torch.nn.Module):\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(body), " " * 8) + "        return x\n"


CASES = [
    # -- deferred side effects: must lower ----------------------------------------------------
    ("print-safe", module("print('x', x.sum(), sep='|', end='', file=sys.stderr)\n"), ("lower", "GM201", "safe")),
    # a logger's call given a tensor is lost if the trace of `x.add_(1)` after it fails (an int or bool
    # tensor), as a print of a tensor is; without code after it, safe
    ("logged-tensor-mutated-after", module("logger.warning('x=%s', x)\nx.add_(1)\n"), ("lower", "GM202", "unsafe")),
    ("logged-tensor", module("logger.warning('x=%s', x)\n"), ("lower", "GM202", "safe")),
    ("root-logging", module("logging.info('called %d', 3)\n"), ("lower", "GM202", "safe")),
    ("logger-log-level", module("logger.log(logging.ERROR, 'bad %s', x.shape)\n"), ("lower", "GM202", "safe")),
    ("exception-outside-handler", module("logger.exception('odd')\n"), ("lower", "GM202", "safe")),
    ("warn-from-import", "from warnings import warn\n" + module("warn('careful', RuntimeWarning, 1)\n"), ("lower", "GM203", "safe")),
    ("print-before-a-tensor-raise", module("print('checking')\nif (x < 0).any():\n    raise ValueError('negative')\n"), ("lower", "GM201", "unsafe")),
    # a print that cannot be deferred stays immediate: the deferred one may come out after it
    ("mixed-immediate-output", module("print('first')\nwarnings.warn('second', stacklevel=2)\n"), ("lower", "GM201", "unsafe")),
    ("print-after-a-tensor-raise", module("if (x < 0).any():\n    raise ValueError('negative')\nprint('checked')\n"), ("lower", "GM201", "safe")),
    ("print-before-a-python-check", module("print('checking')\nif x.dim() != 2:\n    raise ValueError('2-d')\n"), ("lower", "GM201", "safe")),
    # a lowered check in a class that never calls this one is another graph; one that does is not
    ("trap-in-unrelated-class", module("print('x')\n") + "\n\nclass Other(torch.nn.Module):\n    def forward(self, x):\n"
     "        if (x < 0).any():\n            raise ValueError('negative')\n        return x\n", ("lower", "GM201", "safe")),
    ("trap-in-a-user-class", module("print('x')\n") + "\n\nclass User(torch.nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.m = M()\n\n    def forward(self, x):\n        x = self.m(x)\n"
     "        if (x < 0).any():\n            raise ValueError('negative')\n        return x\n", ("lower", "GM201", "unsafe")),
    ("compiled-function", HEAD + "@torch.compile\ndef step(x):\n    print('step', x)\n    return x + 1\n", ("lower", "GM201", "safe")),
    # a call compiled from outside the repository: no class with forward or compiled function
    # here, so no boundary is proven; the is_compiling() guard is offered at unsafe
    ("no-boundary-guard", HEAD + "def helper(x):\n    print('helper', x)\n    return x\n", ("lower", "GM201", "unsafe")),
    # -- deferred side effects: must decline --------------------------------------------------
    ("result-used", module("r = print(x)\n"), ("decline", "GM201", "is used")),
    ("result-used-in-expression", module("x = x + (logger.warning('w') or 0)\n"), ("decline", "GM202", "is used")),
    ("warn-stacklevel", module("warnings.warn('old', DeprecationWarning, stacklevel=2)\n"), ("decline", "GM203", "stacklevel")),
    ("logger-stacklevel", module("logger.warning('old', stacklevel=2)\n"), ("decline", "GM202", "stacklevel")),
    ("logger-stack-info", module("logger.info('here', stack_info=True)\n"), ("decline", "GM202", "stack_info")),
    ("exception-in-handler", module("try:\n    x = x + 1\nexcept Exception:\n    logger.exception('failed')\n"), ("decline", "GM202", "active exception")),
    ("star-args-logging", module("logger.warning(*('a', 1))\n"), ("decline", "GM202", "*args")),
    ("skip-file-prefixes", module("warnings.warn('w', skip_file_prefixes=('/x',))\n"), ("decline", "GM203", "skip_file_prefixes")),
    ("module-level-print", HEAD + "print('import time')\n", ("decline", "GM201", "module level")),
    ("no-boundary-compound-line", HEAD + "def helper(x):\n    y = 1; print('helper', x)\n    return x\n", ("decline", "GM201", "no module class")),
    # -- trap lowering: must lower ------------------------------------------------------------
    ("trap", module("if (x < 0).any():\n    raise ValueError('negative')\n"), ("lower", "GM301", "safe")),
    ("trap-not", module("if not torch.isfinite(x).all():\n    raise OverflowError('inf')\n"), ("lower", "GM301", "safe")),
    ("trap-one-line", module("if x.sum() > 10: raise RuntimeError('too big')\n"), ("lower", "GM301", "safe")),
    # (no entry of the file reaches it: the runtime would keep the Python check under every entry)
    ("trap-no-boundary", HEAD + "def check(x):\n    if (x < 0).any():\n        raise ValueError('negative')\n    return x\n", ("decline", "GM301", "no compiled entry of this file is proven")),
    # -- trap lowering: must decline ----------------------------------------------------------
    ("dynamic-message", module("if (x < 0).any():\n    raise ValueError(f'negative {x.shape}')\n"), ("decline", "GM301", "not a string literal")),
    ("formatted-message", module("if (x < 0).any():\n    raise ValueError('negative %s' % 1)\n"), ("decline", "GM301", "not a string literal")),
    ("custom-exception", "class Bad(ValueError):\n    pass\n\n\n" + module("if (x < 0).any():\n    raise Bad('negative')\n"), ("decline", "GM301", "not a builtin")),
    ("shadowed-builtin", "ValueError = KeyError\n" + module("if (x < 0).any():\n    raise ValueError('negative')\n"), ("decline", "GM301", "not a builtin")),
    ("guard-in-try", module("try:\n    if (x < 0).any():\n        raise ValueError('negative')\nexcept ValueError:\n    x = -x\n"), ("decline", "GM301", "inside the `try`")),
    ("longer-body", module("if (x < 0).any():\n    x = -x\n    raise ValueError('negative')\n"), ("decline", "GM301", "more than raise")),
    ("raise-from", module("if (x < 0).any():\n    raise ValueError('negative') from None\n"), ("decline", "GM301", "from")),
    ("two-arguments", module("if (x < 0).any():\n    raise ValueError('negative', 1)\n"), ("decline", "GM301", "exactly one message")),
    ("bool-operators", module("if (x < 0).any() or (x > 9).any():\n    raise ValueError('out of range')\n"), ("decline", "GM301", "`and`/`or`")),
    ("torch-equal", module("if not torch.equal(x, x.flip(0)):\n    raise ValueError('not a palindrome')\n"), ("lower", "GM302", "safe")),
    ("torch-equal-dynamic-message", module("if torch.equal(x, x.flip(0)):\n    raise ValueError(str(x))\n"), ("decline", "GM302", "not a string literal")),
    ("torch-equal-custom-exception", "class Bad(Exception):\n    pass\n\n\n" + module("if torch.equal(x, x):\n    raise Bad('same')\n"), ("decline", "GM302", "not a builtin")),
    # len() of a dynamic-shape result is a Python int (the break is the dynamic shape): not a candidate
    ("len-of-dynamic-shape", module("if len(torch.unique(x)) > 1:\n    raise ValueError('not constant')\n"), ("ignore", "GM301", "")),
    ("item", module("if x.sum().item() > 3:\n    raise ValueError('too big')\n"), ("decline", "GM301", "Python value")),
]


def outcomes(program: str):
    source = SourceFile("prog.py", program)
    rules = [r for r in all_rules() if r.code.startswith(("GM2", "GM3"))]
    return run_rules(source, RuleContext(file="prog.py", threshold=Safety.UNSAFE), rules)


def test_suite_is_large_enough():
    assert len(CASES) >= 15
    assert sum(1 for c in CASES if c[2][0] in ("decline", "ignore")) >= 15


@pytest.mark.parametrize("name,program,expected", CASES, ids=[c[0] for c in CASES])
def test_case(name, program, expected):
    compile(program, name, "exec")  # every case is valid Python
    kind, rule, detail = expected
    found = [o for o in outcomes(program) if o.rule == rule]
    if kind == "ignore":
        assert found == []
        return
    assert found, f"{rule} did not look at the site"
    first = found[0]
    if kind == "lower":
        assert isinstance(first, Fix), getattr(first, "reason", first)
        assert first.safety.value == detail, first.notes
        assert not first.is_single_range or detail == "unsafe"  # helper + call site = a patch
    else:
        assert isinstance(first, Decline), f"expected a decline, got a fix: {first}"
        assert detail in first.reason, first.reason


def test_fixes_are_multi_place_patches():
    """Helper + call site edits: one Fix with several edits, reported as needing a patch."""
    found = [o for o in outcomes(module("print(x)\n")) if isinstance(o, Fix)]
    assert len(found) == 1 and len(found[0].edits) == 2 and not found[0].is_single_range


def test_guard_fix_text():
    program = HEAD + "def helper(x):\n    logger.warning(\n        'helper %s', x,\n    )\n    return x\n"
    [fix] = [o for o in outcomes(program) if isinstance(o, Fix)]
    assert fix.safety is Safety.UNSAFE and "is_compiling" in fix.title + fix.edits[0].new_text
    assert fix.edits[0].new_text.startswith("    if not torch.compiler.is_compiling(): logger.warning(\n")
    assert "no longer runs at all" in fix.notes and "_graphmend_boundary" in fix.notes
