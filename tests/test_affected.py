"""Affected targets only: a pull request runs a target on its head only when it changes a file
the target's base run read (or one the record cannot vouch for); the others' base results are
carried forward, labelled. Real Dynamo runs on real git repositories; the base runs once (a
warm cache, as a second push to a pull request finds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmend.affected import Change, why_affected
from graphmend.check import check
from graphmend.config import Config, TargetConfig
from graphmend.model import TargetResult
from graphmend.pr import analyse
from tests.support.affected_repo import MODEL_A_BROKEN, commit, make_base


def spying():
    runs: list[list[str]] = []

    def spy(config, **kw):
        if kw.get("dynamic", True) and kw.get("target_names"):
            runs.append(list(kw["target_names"]))
        return check(config, **kw)

    return runs, spy


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """A cache holding the base's results (filled by a first pull request, which runs the base)."""
    cache = tmp_path_factory.mktemp("cache")
    root, base = make_base(tmp_path_factory.mktemp("warmup"))
    head = commit(root, {"README.md": "# models\n\nMore words.\n"})
    runs, spy = spying()
    result = analyse(root, base, head, cache_dir=cache, propose_fixes=False, check_fn=spy)
    assert runs == [["ta", "tb"]]  # the base, cold: both targets; the head: none
    assert result.review.timing.cache == "miss"
    return cache


def test_a_readme_only_pull_request_runs_no_target(tmp_path, warm):
    root, base = make_base(tmp_path)
    head = commit(root, {"README.md": "# models\n\nA README change only.\n"})
    runs, spy = spying()

    result = analyse(root, base, head, cache_dir=warm, propose_fixes=False, check_fn=spy)

    assert runs == []
    assert {t.name: t.status for t in result.review.targets} == {"ta": "unaffected", "tb": "unaffected"}
    assert all("carried forward" in t.reason for t in result.review.targets)
    timing = result.review.timing
    assert (timing.cache, timing.targets_analysed, timing.targets_unaffected, timing.base_targets_cached) == ("hit", 0, 2, 2)
    assert result.base_from_cache and result.verdict.passed


def test_a_break_in_one_file_runs_only_the_target_that_reads_it(tmp_path, warm):
    root, base = make_base(tmp_path)
    head = commit(root, {"src/a.py": MODEL_A_BROKEN})
    runs, spy = spying()

    result = analyse(root, base, head, cache_dir=warm, propose_fixes=False, check_fn=spy)

    assert runs == [["ta"]]  # on the head only; the base came from the cache
    targets = {t.name: t for t in result.review.targets}
    assert targets["ta"].status == "analysed" and "src/a.py" in targets["ta"].reason
    assert targets["tb"].status == "unaffected"
    assert targets["ta"].head.break_count >= 1 and targets["ta"].base.break_count == 0
    introduced = [f for f in result.review.findings if f.status == "introduced"]
    assert introduced and all(f.target == "ta" and f.file == "src/a.py" for f in introduced)
    assert not result.verdict.passed
    assert targets["ta"].duration_s > 0
    assert {s.name for s in result.review.timing.stages} >= {"config", "base", "head", "static", "total"}


def test_a_data_file_the_target_read_is_in_its_record_and_affects_it(warm):
    from graphmend import cache

    [path] = list(warm.glob("*.json"))
    entry = cache.load(warm, path.stem)
    change = (Change("M", "tools/scale.txt"),)
    # ta opened it (the worker's audit hook saw it); tb did not, but a non-Python file may be
    # read where the record cannot see (a native library), so tb runs too.
    assert why_affected(entry.target("ta"), change, CONFIG) == "it reads tools/scale.txt, which the pull request changes"
    assert "cannot vouch" in why_affected(entry.target("tb"), change, CONFIG)


def test_the_record_holds_what_each_target_read(warm):
    from graphmend import cache

    [path] = list(warm.glob("*.json"))
    entry = cache.load(warm, path.stem)
    ta, tb = entry.target("ta"), entry.target("tb")
    assert {"src/a.py", "tools/targets.py", "tools/scale.txt"} <= set(ta.depends_on)
    assert "src/b.py" not in ta.depends_on
    assert "src/b.py" in tb.depends_on and not {"src/a.py", "tools/scale.txt"} & set(tb.depends_on)


# ------------------------------------------------------------------------------------------
# What the record can and cannot vouch for


def _base(depends_on=("src/a.py", "tools/targets.py"), error=None) -> TargetResult:
    return TargetResult(name="ta", depends_on=depends_on, error=error)


CONFIG = Config(root=Path("."), targets=(TargetConfig(name="ta", entry="tools.targets:ta"),))


@pytest.mark.parametrize("change, affected", [
    (Change("M", "src/a.py"), "it reads src/a.py"),
    (Change("M", "src/b.py"), ""),  # a module it never imported
    (Change("A", "src/c.py"), "adds src/c.py"),  # a new module may shadow an import
    (Change("D", "src/b.py"), "removes src/b.py"),
    (Change("M", "pyproject.toml"), "cannot vouch"),  # a native reader is unseen by the record
    (Change("M", "docs/guide.md"), ""),
    (Change("A", "docs/new.png"), ""),
    (Change("M", ".github/workflows/ci.yml"), ""),
    (Change("M", "graphmend.yml"), ""),  # the analysis uses the base branch's
    (Change("M", ".gitattributes"), "cannot vouch"),  # working-tree-encoding changes what the target reads
])
def test_what_the_record_vouches_for(change, affected):
    why = why_affected(_base(), (change,), CONFIG)
    assert (affected in why) if affected else why == ""


def test_a_target_without_a_complete_record_or_a_base_run_always_runs():
    assert "no complete record" in why_affected(_base(depends_on=None), (Change("M", "README.md"),), CONFIG)
    assert "could not run" in why_affected(_base(error="boom"), (), CONFIG)
    assert "not at hand" in why_affected(None, (), CONFIG)


def test_a_change_to_the_targets_own_configuration_reruns_it():
    import dataclasses

    head = dataclasses.replace(CONFIG, targets=(TargetConfig(name="ta", entry="tools.targets:ta", dtype="float64"),))
    assert "its configuration" in why_affected(_base(), (), CONFIG, head)
    assert why_affected(_base(), (), CONFIG, CONFIG) == ""


def test_all_targets_runs_every_target(tmp_path, warm):
    from graphmend import cache
    from graphmend.affected import run_sides

    [path] = list(warm.glob("*.json"))
    entry = cache.load(warm, path.stem)
    asked: list[list[str]] = []

    def record(config, **kw):  # only what run_sides asks for: the head's targets
        asked.append(list(kw.get("target_names") or []))
        return entry.report if kw.get("target_names") else type(entry.report)()

    sides = run_sides(check=record, base_config=CONFIG, head_config=CONFIG, pr_config=None, changes=None,
                      names=["ta", "tb"], static=False, entry=entry, store=lambda *a: None, say=lambda m: None)
    assert asked == [["ta", "tb"]]
    assert set(sides.status.values()) == {"analysed"}


def test_a_record_that_is_incomplete_or_names_a_path_outside_the_repository_vouches_for_nothing(tmp_path):
    from graphmend.detect.dynamic import result_from_data

    cfg = Config(root=tmp_path)

    def depends(reads):
        return result_from_data("ta", {"sites": [], "traced_files": [], "reads": reads}, cfg, tmp_path).depends_on

    assert depends({"files": ["src/a.py", "tools/x.txt"], "complete": True}) == ("src/a.py", "tools/x.txt")
    assert depends({"files": ["src/a.py"], "complete": False}) is None  # overflowed, or not recorded from the start
    for bad in ("../secret", "/etc/passwd", "src/../../x", ".git/config", "a\nb", "", 5):
        assert depends({"files": ["src/a.py", bad], "complete": True}) is None, bad
    assert depends({"files": ["x"] * 50_001, "complete": True}) is None  # over the bound
    assert depends(None) is None


def test_a_symlinked_module_retargeted_by_the_pull_request_affects_the_target_that_imports_it(tmp_path):
    # src/a.py is a link to src/impl_a.py: the import opens src/a.py, the record must name it
    # (and what it points to), or retargeting the link at another existing module is unseen.
    import os

    from tests.bot.conftest import commit_all

    root, _ = make_base(tmp_path)
    (root / "src" / "impl_a.py").write_text((root / "src" / "a.py").read_text())
    (root / "src" / "spare.py").write_text((root / "src" / "a.py").read_text())
    (root / "src" / "a.py").unlink()
    os.symlink("impl_a.py", root / "src" / "a.py")
    base = commit_all(root, "a.py links to impl_a.py")
    (root / "src" / "spare.py").write_text(MODEL_A_BROKEN)
    (root / "src" / "a.py").unlink()
    os.symlink("spare.py", root / "src" / "a.py")
    head = commit_all(root, "a.py links to a broken module")
    runs, spy = spying()

    result = analyse(root, base, head, propose_fixes=False, check_fn=spy)

    targets = {t.name: t for t in result.review.targets}
    assert targets["ta"].status == "analysed", targets["ta"].reason
    assert "src/a.py" in targets["ta"].reason
    assert not result.verdict.passed


def test_every_link_on_the_way_to_a_file_read_is_in_the_record(tmp_path):
    import os

    from graphmend.worker import _names_of

    (tmp_path / "impl").mkdir()
    (tmp_path / "impl" / "c.py").write_text("")
    os.symlink("impl/c.py", tmp_path / "b.py")
    os.symlink(str(tmp_path / "b.py"), tmp_path / "a.py")  # an absolute link to a relative one
    os.symlink("impl", tmp_path / "pkg")
    assert _names_of(str(tmp_path / "a.py")) == {str(tmp_path / n) for n in ("a.py", "b.py", "impl/c.py")}
    assert _names_of(str(tmp_path / "pkg" / "c.py")) == {str(tmp_path / n) for n in ("pkg/c.py", "pkg", "impl/c.py")}
    assert _names_of(str(tmp_path / "impl" / "c.py")) == {str(tmp_path / "impl" / "c.py")}
    os.symlink("loop", tmp_path / "loop")
    assert str(tmp_path / "loop") in _names_of(str(tmp_path / "loop"))  # a loop ends at the kernel's limit


def test_a_shard_verifies_its_fixes_on_the_other_shards_targets_that_may_read_the_files():
    """What a shard knows of the targets outside its share: an unaffected one's base record stands
    for its head (it is verified on only if it reads a fixed file); an affected one has its head
    record in another shard (so it is verified on); one with no base record here is unknown."""
    from graphmend.affected import outside_share
    from graphmend.cache import Entry
    from graphmend.model import CheckReport
    from graphmend.pr import _reading

    config = Config(root=Path("."), targets=tuple(TargetConfig(name=n, entry=f"t:{n}") for n in ("ta", "tb", "tc", "td")))
    records = {"ta": ("src/a.py",), "tb": ("src/b.py",), "tc": ("src/c.py", "src/a.py")}
    entry = Entry(CheckReport(targets=tuple(TargetResult(name=n, depends_on=d) for n, d in records.items())),
                  frozenset(records), False)
    changes = (Change("M", "src/a.py"), Change("M", "src/c.py"))

    outside = outside_share(entry, ["ta", "tb", "tc", "td"], ["ta"], changes, config, None)

    assert [t.name for t in outside.carried] == ["tb"]  # tc reads a changed file: affected; td: no record here
    assert outside.unknown == ("td",)
    mine = CheckReport(targets=(TargetResult(name="ta", depends_on=("src/a.py",)),))
    verified_on = _reading(config, (mine, mine, CheckReport(targets=outside.carried)), {"src/a.py"})
    assert [t.name for t in verified_on.targets] == ["ta", "tc", "td"]  # never tb, which reads src/b.py only
    assert outside_share(entry, ["ta", "tb", "tc", "td"], ["ta"], None, config, None).carried == ()  # --all-targets
