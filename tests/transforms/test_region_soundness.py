"""Deferral (GM2xx) and trap lowering (GM3xx) judged against what can raise or write state in the
same compiled graph: a check in a later loop iteration, an index that may be out of range, a
`try` in a calling method, Python-side state written before the check. Each is a small module
that the landed rules used to rewrite as `safe`."""

from __future__ import annotations

import pytest

from graphmend.model import Decline, Fix, Safety
from graphmend.transforms.base import RuleContext, SourceFile
from graphmend.transforms.print_in_compiled_region import PrintInCompiledRegion
from graphmend.transforms.raise_on_tensor_condition import RaiseOnTensorCondition

CTX = RuleContext(threshold=Safety.UNSAFE)

TRAP_DECLINED = {
    "state written before the check": ('''import torch


class Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if (x < 0).any():
            raise ValueError("negative input")
        return x * 2
''', "`self.calls += 1` at line 10 may write state"),
    "a buffer updated in place in a module that uses this one": ('''import torch


class Check(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.check = Check()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen.add_(1)
        return self.check(x)
''', "self.seen.add_(1)"),
    "a try in the calling method": ('''import torch


class Check(torch.nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.check = Check()

    def forward(self, x):
        try:
            return self.check(x)
        except ValueError:
            return x.abs()
''', "the `try` at line 17 may call this check"),
}

PRINT_UNSAFE = {
    "a check earlier in the loop body runs again after the print": ('''import torch


class Loop(torch.nn.Module):
    def forward(self, xs):
        for x in xs:
            if (x < 0).any():
                raise ValueError("negative input")
            print("ok", x.sum())
        return xs
''', "line 7 may raise inside the same compiled graph"),
    "an index that may be out of range after the print": ('''import torch


class Gather(torch.nn.Module):
    def forward(self, x, idx):
        print("gathering", x.shape)
        return x[idx]
''', "`x[idx]` at line 7 may fail on the values"),
}


@pytest.mark.parametrize("case", sorted(TRAP_DECLINED))
def test_trap_lowering_declined(case):
    text, reason = TRAP_DECLINED[case]
    outcomes = RaiseOnTensorCondition().run(SourceFile("m.py", text), CTX, None)
    if case in LOWERED_UNDER_CLEAN_ENTRIES_ONLY:
        # the check is lowered only when the clean class is the compiled entry (the runtime compares
        # it); under the class that writes first it stays a Python check
        [fix] = [o for o in outcomes if isinstance(o, Fix)]
        assert f"entries=(__name__ + '.{LOWERED_UNDER_CLEAN_ENTRIES_ONLY[case]}',))" in fix.edits[0].new_text
        return
    assert not any(isinstance(o, Fix) for o in outcomes)
    reasons = [o.reason for o in outcomes if isinstance(o, Decline)]
    assert any(reason in r for r in reasons), reasons


LOWERED_UNDER_CLEAN_ENTRIES_ONLY = {"a buffer updated in place in a module that uses this one": "Check"}


@pytest.mark.parametrize("case", sorted(PRINT_UNSAFE))
def test_deferral_is_unsafe(case):
    text, reason = PRINT_UNSAFE[case]
    fixes = [o for o in PrintInCompiledRegion().run(SourceFile("m.py", text), CTX, None) if isinstance(o, Fix)]
    assert fixes and all(f.safety is Safety.UNSAFE for f in fixes)
    assert any(reason in f.notes for f in fixes), [f.notes for f in fixes]
