"""verify_fixes runs a fix only on the targets it can reach: a target whose "before" run read none
of the files the fixed tree changes is reported unaffected, not run; one that imports the fixed
file, however indirectly, runs and is judged. Real Dynamo on CPU (backend "eager"), real git."""

from __future__ import annotations

import dataclasses

import pytest

from graphmend.affected import Change, why_changes_reach
from graphmend.config import load_config
from graphmend.model import Edit, Fix, FileWrite, Safety, to_dict
from graphmend.report.markdown_verify import render_verify_text
from graphmend.schemas import validate
from graphmend.verify import verify_fixes

MODEL = '''import torch

from pkg.shared import scale


class {cls}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
{body}        return h
'''
BRANCH = "        if h.sum() > 0:\n            h = h * 2\n        else:\n            h = h - 1\n"
WHERE = "        h = torch.where(h.sum() > 0, h * 2, h - 1)\n"
TARGETS = '''import torch


def a():
    from pkg.a import A

    torch.manual_seed(0)
    return A().eval(), (torch.randn(2, 4),)


def b():
    from pkg.b import B

    torch.manual_seed(0)
    return B().eval(), (torch.randn(2, 4),)
'''
CONFIG = '''paths: [pkg/]
targets:
  - {name: a, entry: 'tools.targets:a', device: cpu, backend: eager}
  - {name: b, entry: 'tools.targets:b', device: cpu, backend: eager}
'''
# pkg/a.py does not use pkg/shared.py at all; pkg/b.py reaches it through pkg/b_helpers.py.
A = MODEL.replace("from pkg.shared import scale\n", "").format(cls="A", body=BRANCH)
B = MODEL.replace("from pkg.shared import scale", "from pkg.b_helpers import scaled").format(
    cls="B", body="        h = scaled(h)\n")
HELPERS = "from pkg.shared import scale\n\n\ndef scaled(h):\n    return scale(h)\n"
SHARED = "def scale(h):\n    return h * 2\n"


def files() -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/a.py": A, "pkg/b.py": B, "pkg/b_helpers.py": HELPERS, "pkg/shared.py": SHARED,
            "tools/__init__.py": "", "tools/targets.py": TARGETS, "graphmend.yml": CONFIG}


def fix_of(path: str, old: str, new: str, fingerprint: str, text: str, rule: str = "GM101") -> Fix:
    line = text.splitlines().index(old.splitlines()[0]) + 1
    edit = Edit(file=path, start_line=line, end_line=line + old.count("\n") - 1, new_text=new, old_text=old)
    return Fix(rule=rule, title=fingerprint, safety=Safety.SAFE, edits=(edit,), file=path, line=line, fingerprint=fingerprint)


@pytest.mark.slow
def test_a_fix_runs_only_on_the_targets_that_read_what_it_changes(make_repo):
    root = make_repo(files())
    config = load_config(root)
    good = fix_of("pkg/a.py", BRANCH, WHERE, "good", A)
    # Wrong, two imports away from target b (b -> b_helpers -> shared): it must still be caught.
    wrong = fix_of("pkg/shared.py", "    return h * 2\n", "    return h * 3\n", "wrong", SHARED)
    report = verify_fixes(config, [good, wrong])
    validate("verify", to_dict(report))

    verdicts = {f.fingerprint: f for f in report.fixes}
    assert verdicts["good"].ok and verdicts["good"].alone
    assert not verdicts["wrong"].ok and verdicts["wrong"].reason.startswith("b: output differs"), verdicts["wrong"].reason
    # The tree with the passing fix: a ran and is equivalent with a break fewer; b never read
    # pkg/a.py, so it was not run on that tree, and says so.
    a, b = report.targets
    assert a.ok and not a.unaffected and a.cases >= 1
    assert a.breaks_after < a.breaks_before
    assert b.ok and b.unaffected == "not run: it reads none of pkg/a.py, which the change edits"
    assert b.graphs_before == b.graphs_after and b.breaks_before == b.breaks_after == 0
    text = render_verify_text(report)
    assert "b: unaffected" in text and "not run: it reads none of pkg/a.py" in text
    assert (root / "pkg/a.py").read_text() == A and (root / "pkg/shared.py").read_text() == SHARED


def test_what_a_record_cannot_vouch_for_reaches_every_target(make_repo):
    config = load_config(make_repo(files()))
    reads = {"tools/targets.py", "pkg/a.py", "pkg/__init__.py"}
    assert why_changes_reach(reads, [Change("M", "pkg/b.py")], config) == ""
    assert why_changes_reach(reads, [Change("M", "README.md")], config) == ""
    assert "reads pkg/a.py" in why_changes_reach(reads, [Change("M", "pkg/b.py"), Change("M", "pkg/a.py")], config)
    # a new module (a fix's runtime module beside the package) may shadow an import
    assert "adds pkg/_graphmend_runtime.py" in why_changes_reach(reads, [Change("A", "pkg/_graphmend_runtime.py")], config)
    assert "removes" in why_changes_reach(reads, [Change("D", "pkg/b.py")], config)
    assert "cannot vouch" in why_changes_reach(reads, [Change("M", "pkg/data.json")], config)
    assert "no complete record" in why_changes_reach(None, [Change("M", "pkg/b.py")], config)


@pytest.mark.slow
def test_a_fix_that_adds_a_module_runs_on_every_target(make_repo):
    """The file a fix creates is a change no record vouches for: both targets run."""
    root = make_repo(files())
    config = load_config(root)
    fix = fix_of("pkg/a.py", BRANCH, WHERE, "good", A)
    fix = dataclasses.replace(fix, files=(FileWrite(path="pkg/extra.py", text="X = 1\n", action="create"),))
    report = verify_fixes(config, [fix], count_breaks=False)
    assert [f.ok for f in report.fixes] == [True]
    assert [(t.name, t.ok, t.unaffected) for t in report.targets] == [("a", True, ""), ("b", True, "")]
