"""verify on a small real repository, real Dynamo on CPU (backend "eager"), real git."""

from __future__ import annotations

import pytest

from graphmend.config import load_config
from graphmend.model import Edit, Fix, Safety, to_dict
from graphmend.schemas import validate
from graphmend.trees import TreeError
from graphmend.verify import verify, verify_fixes
from tests.verify.repo_files import BRANCH, MODEL, SWAPPED, WHERE, files


def branch_fix(replacement: str, fingerprint: str) -> Fix:
    start = MODEL.splitlines().index("        if x.sum() > 0:") + 1
    edit = Edit(file="pkg/model.py", start_line=start, end_line=start + 3, new_text=replacement, old_text=BRANCH)
    return Fix(rule="GM101", title="predicate the branch", safety=Safety.SAFE, edits=(edit,), file="pkg/model.py",
               line=start, fingerprint=fingerprint)


@pytest.mark.slow
def test_equivalent_fix_verifies_and_swapped_where_arms_are_withdrawn(make_repo):
    root = make_repo(files())
    config = load_config(root)
    good, swapped = branch_fix(WHERE, "good"), branch_fix(SWAPPED, "swapped")
    report = verify_fixes(config, [good, swapped], grad=True)
    validate("verify", to_dict(report))

    verdicts = {f.fingerprint: f for f in report.fixes}
    assert verdicts["good"].ok and verdicts["good"].alone
    assert not verdicts["swapped"].ok and not verdicts["swapped"].alone
    assert "output differs" in verdicts["swapped"].reason
    assert report.withdrawn == (verdicts["swapped"],)
    assert report.passed_fingerprints == {"good"}
    assert report.kept([good, swapped]) == (good,)
    assert report.failed  # a withdrawn fix is never green

    # The report describes the tree with the passing fix: equivalent (outputs, gradients,
    # printed text, log records, the failing guard), with one break fewer.
    (target,) = report.targets
    assert target.ok, target.mismatches
    assert target.cases == 4 and target.failing_cases == 1
    assert target.max_abs_error_eager == 0.0
    assert isinstance(target.recompiles_before, int) and isinstance(target.recompiles_after, int)
    assert target.breaks_before is not None and target.breaks_after is not None
    assert target.breaks_after < target.breaks_before
    assert target.environment.backend == "eager" and target.environment.torch_version
    # The working tree itself was never touched.
    assert (root / "pkg/model.py").read_text() == MODEL


@pytest.mark.slow
def test_changed_print_exception_type_log_site_and_weights_are_caught(make_repo):
    repo_files = files()
    repo_files["graphmend.yml"] += "  - name: broken\n    entry: tools.targets:no_such_factory\n    device: cpu\n    backend: eager\n"
    root = make_repo(repo_files)
    with pytest.raises(TreeError, match="unknown revision"):
        verify(load_config(root), base="no-such-rev")
    changed = (MODEL.replace('print("toy forward")', 'print("toy forward!")')
               .replace('raise ValueError("activation too large")', 'raise RuntimeError("activation too large")')
               .replace('        log.warning("scaled")\n', '        note()\n')
               .replace("class Toy(", 'def note():\n    log.warning("scaled")\n\n\nclass Toy(')
               .replace("self.fc", "self.proj"))
    (root / "pkg/model.py").write_text(changed)
    report = verify(load_config(root), base="HEAD", count_breaks=False)
    validate("verify", to_dict(report))
    target, broken = report.targets
    assert not target.ok and report.failed
    # A target that cannot be built is an error with its cause; the other targets still ran.
    assert not broken.ok and "no_such_factory" in broken.error and "\n" not in broken.error
    kinds = {(m.kind, m.check) for m in target.mismatches}
    assert {("stdout", "eager"), ("stdout", "compiled"), ("exception", "eager"), ("exception", "compiled"),
            ("log", "eager")} <= kinds
    exc = next(m for m in target.mismatches if m.kind == "exception" and m.check == "eager")
    assert exc.case == "inputs[2]" and "RuntimeError instead of ValueError" in exc.detail
    stdout = next(m for m in target.mismatches if m.kind == "stdout")
    assert "toy forward!" in stdout.detail
    log = next(m for m in target.mismatches if m.kind == "log")
    assert "funcName 'note' instead of 'forward'" in log.detail
    # Renamed parameters cannot take the original's weights: reported, not hidden.
    state = " ".join(m.detail for m in target.mismatches if m.kind == "state")
    assert "fc.weight" in state and "proj.weight" in state


@pytest.mark.slow
def test_verify_edits_checks_fixes_together_and_bisects_only_on_failure(make_repo):
    from graphmend.verify import verify_edits

    root = make_repo(files())
    config = load_config(root)
    line = MODEL.splitlines().index('        print("toy forward")') + 1
    same_print = Fix(rule="GM201", title="same print", safety=Safety.SAFE, file="pkg/model.py", line=line, fingerprint="print",
                     edits=(Edit(file="pkg/model.py", start_line=line, end_line=line, old_text='        print("toy forward")\n',
                                 new_text='        print("toy " + "forward")\n'),))
    swapped = branch_fix(SWAPPED, "swapped")
    progress: list[str] = []
    report = verify_edits(config, root, [same_print, swapped], progress=progress.append)
    validate("verify", to_dict(report))
    keep, wrong = report.fixes
    assert keep.ok and keep.fingerprint == "print"
    assert not wrong.ok and "output differs" in wrong.reason
    # together first; on failure each half alone; nothing more
    assert [p for p in progress if p.startswith("verify: ") and ("together" in p or " at " in p)] == [
        "verify: 2 fix(es) together", f"verify: GM201 at pkg/model.py:{line}", f"verify: GM101 at pkg/model.py:{swapped.line}"]
    (target,) = report.targets  # the tree with the kept fix
    assert target.ok and not target.mismatches

    # All passing: one run, no bisection.
    progress.clear()
    report = verify_edits(config, root, [same_print], progress=progress.append)
    assert [f.ok for f in report.fixes] == [True] and sum("verify: " in p for p in progress) == 1
