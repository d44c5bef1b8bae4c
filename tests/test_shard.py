"""Sharding: ``pr --shard i/n`` analyses a balanced, deterministic share of the targets;
``merge`` joins the partials into the review an unsharded run writes, and a missing shard fails
the merged gate, named. Real Dynamo on a real repository (its base from a warm cache)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from bot.gate import compute_verdict
from bot.review import dump, load
from graphmend.cli import main
from graphmend.model import to_dict
from graphmend.pr import analyse
from graphmend.shard import ShardError, merge, parse, plan
from tests.support.affected_repo import MODEL_A_BROKEN, commit, make_base


def test_parse_names_the_bad_value():
    assert parse("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1/0", "1/999"):
        with pytest.raises(ShardError, match="--shard"):
            parse(bad)


def test_the_plan_is_balanced_by_duration_and_deterministic():
    durations = {f"t{i:02d}": float(d) for i, d in enumerate([60, 50, 40, 30, 20, 10, 5, 5, 5, 5, 1, 1])}
    shares = plan(list(durations), durations, 3)
    names = list(durations)
    random.Random(1).shuffle(names)
    assert plan(names, durations, 3) == shares  # the order of the configuration does not matter
    assert sorted(n for s in shares for n in s) == sorted(durations)
    loads = [sum(durations[n] for n in s) for s in shares]
    assert max(loads) - min(loads) <= 10, loads  # by count alone, one shard would get 60+30+10+5=105 of 232
    # a target with no recorded duration: every target weighs the same (balanced by count)
    assert plan(["new", *durations], durations, 3) == plan(["new", *durations], {}, 3)
    assert sorted(map(len, plan(["new", *durations], durations, 3))) == [4, 4, 5]


def test_shards_holding_different_parts_of_the_record_plan_the_same_shares():
    """On ephemeral runners each shard restores the cache entry it saved: its own share's
    durations. Were the unknown ones guessed (e.g. as the median of the known), each shard would
    plan other shares, and a target could fall between them."""
    names = [f"t{i}" for i in range(9)]
    durations = {n: float(d) for n, d in zip(names, [9, 1, 7, 3, 5, 2, 8, 4, 6])}
    cold = plan(names, {}, 3)
    for index, share in enumerate(cold, start=1):
        restored = {n: durations[n] for n in share}  # what this shard stored on the cold run
        assert plan(names, restored, 3) == cold, index
    assert plan(names, durations, 3) != cold  # a complete record balances by duration


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """(root, base, head, cache): a pull request adding a break to src/a.py, the cache folder empty."""
    cache = tmp_path_factory.mktemp("cache")
    root, base = make_base(tmp_path_factory.mktemp("repo"))
    head = commit(root, {"src/a.py": MODEL_A_BROKEN})
    return root, base, head, cache


@pytest.fixture(scope="module")
def pr(warm):
    """The pull request analysed unsharded (which warms the cache with every target) and as 4
    shards, fixes proposed and verified: each shard then holds every target's base record."""
    root, base, head, cache = warm
    unsharded = analyse(root, base, head, cache_dir=cache)  # also warms the cache
    partials = [analyse(root, base, head, cache_dir=cache, shard=(i, 4)).review for i in range(1, 5)]
    return unsharded.review, partials, root


def _comparable(review) -> dict:
    data = to_dict(review)
    data.pop("timing")
    data.pop("shard", None)
    for t in data["targets"]:
        t.pop("duration_s")
    data["stages"] = [(s["name"], s["ran"]) for s in data["stages"]]  # notes say "1 of 2" vs "1 of 1"
    return data


def test_four_shards_merged_equal_the_unsharded_review_fixes_included(pr):
    """Each shard proposes fixes for the breaks its targets found and verifies them on every target
    that reads the files they edit, its own or (by the record in the shared base cache) another
    shard's: the merged review, fixes and their verification included, is the unsharded one."""
    unsharded, partials, _ = pr
    [new] = [f for f in unsharded.findings if f.status == "introduced" and f.target == "ta"]
    assert new.fix is not None and new.fix.verification.status == "passed"
    assert all(p.shard is not None and p.shard.count == 4 for p in partials)
    assert sorted(n for p in partials for n in p.shard.plan[p.shard.index - 1]) == ["ta", "tb"]
    merged, problems, verdict = merge(partials)
    assert problems == []
    assert _comparable(merged) == _comparable(unsharded)
    assert not verdict.passed and verdict.new >= 1
    assert merged.timing.targets_analysed == 1 and merged.timing.targets_unaffected == 1


def test_a_cold_cache_runs_each_shards_share_of_the_base_once_and_then_hits(tmp_path):
    """As on ephemeral runners: each shard has its own cache folder (the entry actions/cache saved
    for it). Cold, a shard runs the base for its own share only and stores only that; the next
    run of every shard is a hit for all its targets, and the shards still plan the same shares."""
    from graphmend import cache as cache_mod

    root, base = make_base(tmp_path)
    head = commit(root, {"README.md": "# models\n\nMore words.\n"})
    folders = [tmp_path / f"cache-{i}" for i in (1, 2)]
    cold = [analyse(root, base, head, cache_dir=folders[i - 1], propose_fixes=False, shard=(i, 2)).review for i in (1, 2)]
    plan_ = cold[0].shard.plan
    assert plan_ == cold[1].shard.plan == (("ta",), ("tb",))
    for i, review in enumerate(cold, start=1):
        assert (review.timing.base_targets_run, review.timing.base_targets_cached, review.timing.cache) == (1, 0, "miss")
        assert review.timing.targets_analysed == 0  # a README-only pull request: no target on the head
        [path] = folders[i - 1].glob("*.json")
        entry = cache_mod.load(folders[i - 1], path.stem)
        assert entry.targets == set(plan_[i - 1]) and entry.static == (i == 1)  # only what this shard ran

    warm = [analyse(root, base, head, cache_dir=folders[i - 1], propose_fixes=False, shard=(i, 2)).review for i in (1, 2)]
    assert [w.shard.plan for w in warm] == [plan_, plan_]
    assert [(w.timing.base_targets_run, w.timing.base_targets_cached, w.timing.cache) for w in warm] == [(0, 1, "hit")] * 2
    merged_cold, problems, _ = merge(cold)
    merged_warm, problems_warm, verdict = merge(warm)
    assert problems == problems_warm == [] and verdict.passed
    assert _comparable(merged_warm) == _comparable(merged_cold)


def test_a_shard_without_the_other_shards_records_proposes_no_fix_and_says_why(tmp_path):
    """A cold cache of its own (as on an ephemeral runner): the shard cannot tell whether the other
    shard's target reads src/a.py, so a fix it verified on its own targets alone could break that
    one. It proposes none, and the finding says why."""
    root, base = make_base(tmp_path)
    head = commit(root, {"src/a.py": MODEL_A_BROKEN})
    review = analyse(root, base, head, cache_dir=tmp_path / "cache", shard=(1, 2)).review
    assert review.shard.plan == (("ta",), ("tb",))
    fix = next(s for s in review.stages if s.name == "fix")
    assert not fix.ran and "no record of what 1 target(s) of the other shards read (tb)" in fix.reason
    [new] = [f for f in review.findings if f.status == "introduced"]
    assert new.fix is None and "no record of what" in (new.decline or "")


def test_a_missing_shard_fails_the_merged_gate_naming_it(pr, tmp_path, capsys):
    _, partials, _ = pr
    holder = next(p for p in partials if "ta" in p.shard.plan[p.shard.index - 1])
    files = []
    for p in partials:
        if p is not holder:
            files.append(tmp_path / f"partial-{p.shard.index}.json")
            files[-1].write_text(dump(p))
    out = tmp_path / "review.json"

    code = main(["merge", *map(str, files), "-o", str(out), "--summary", str(tmp_path / "summary.md")])

    assert code == 1
    missing = f"shard {holder.shard.index}/4 did not report"
    assert missing in capsys.readouterr().err
    review = load(out)  # as graphmend post reads it: the gate is recomputed from the file
    verdict = compute_verdict(review)
    assert not verdict.passed
    assert {f"shard-{holder.shard.index}-of-4", "ta"} <= set(verdict.failed_targets)
    ta = next(t for t in review.targets if t.name == "ta")
    assert ta.status == "not-analysed" and missing in ta.head.error
    assert "#### Time" in (tmp_path / "summary.md").read_text()


def _without(partial, name: str):
    """``partial`` as a run would write it whose plan left ``name`` out (a bug, or another configuration)."""
    shard = partial.shard
    return dataclasses.replace(partial, shard=dataclasses.replace(
        shard, plan=tuple(tuple(n for n in s if n != name) for s in shard.plan)))


def test_a_configured_target_no_shard_planned_fails_the_merged_gate_naming_it(pr, tmp_path, capsys):
    _, partials, _ = pr
    assert all(p.shard.targets == ("ta", "tb") for p in partials)  # every partial records the configured targets
    unplanned = [_without(p, "ta") for p in partials]  # ta's shard still reports it, but ta is in no plan

    merged, problems, verdict = merge(unplanned)

    assert any("in no shard's plan" in p and "ta" in p for p in problems), problems
    ta = next(t for t in merged.targets if t.name == "ta")
    assert ta.status == "not-analysed" and "in no shard's plan" in ta.head.error
    assert not verdict.passed and "ta" in verdict.failed_targets
    assert not any(f.target == "ta" for f in merged.findings)  # the results of an unplanned target are not used

    files = []
    for p in unplanned:
        files.append(tmp_path / f"p{p.shard.index}.json")
        files[-1].write_text(dump(p))
    assert main(["merge", *map(str, files), "-o", str(tmp_path / "r.json"), "-C", str(tmp_path)]) == 1
    assert "in no shard's plan, not analysed (the gate fails): ta" in capsys.readouterr().err
    assert not compute_verdict(load(tmp_path / "r.json")).passed


def test_merge_in_a_checkout_checks_the_plan_against_the_base_configuration(pr, tmp_path, capsys):
    _, partials, root = pr
    # Partials of a run whose configuration had ta only (consistent among themselves): the base
    # commit's graphmend.yml also configures tb, which none of them planned.
    narrow = [dataclasses.replace(p, shard=dataclasses.replace(p.shard, targets=("ta",))) for p in
              (_without(p, "tb") for p in partials)]
    files = []
    for p in narrow:
        files.append(tmp_path / f"p{p.shard.index}.json")
        files[-1].write_text(dump(p))
    elsewhere = tmp_path / "not-a-checkout"
    elsewhere.mkdir()
    out = tmp_path / "review.json"

    assert main(["merge", *map(str, files), "-o", str(out), "-C", str(elsewhere)]) == 1  # ta's break: not because of tb
    assert "tb" not in {t.name for t in load(out).targets}
    capsys.readouterr()
    assert main(["merge", *map(str, files), "-o", str(out), "-C", str(root), "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert "in no shard's plan, not analysed (the gate fails): tb" in captured.err
    assert json.loads(captured.out)["configured_targets_from"] == "base commit"
    tb = next(t for t in load(out).targets if t.name == "tb")
    assert tb.status == "not-analysed" and "tb" in compute_verdict(load(out)).failed_targets


def test_a_plan_naming_a_target_not_configured_is_refused(pr):
    _, partials, _ = pr
    with pytest.raises(ShardError, match=r"planned targets that are not configured \(tb\)"):
        merge(partials, configured=["ta"])
    other = dataclasses.replace(partials[1], shard=dataclasses.replace(partials[1].shard, targets=("ta",)))
    with pytest.raises(ShardError, match="for other targets"):
        merge([partials[0], other, *partials[2:]])


def test_partials_of_another_head_or_configuration_are_refused(pr, tmp_path, capsys):
    _, partials, _ = pr
    other = dataclasses.replace(partials[1], head_sha="f" * 40)
    with pytest.raises(ShardError, match="another head commit"):
        merge([partials[0], other, *partials[2:]])
    foreign = dataclasses.replace(partials[1], shard=dataclasses.replace(partials[1].shard, config_digest="0" * 16))
    with pytest.raises(ShardError, match="another configuration"):
        merge([partials[0], foreign])
    with pytest.raises(ShardError, match="two partials for shard 1/4"):
        merge([partials[0], partials[0]])
    files = []
    for i, p in enumerate([partials[0], other]):
        files.append(tmp_path / f"p{i}.json")
        files[-1].write_text(dump(p))
    assert main(["merge", *map(str, files), "-o", str(tmp_path / "r.json")]) == 2
    assert "another head commit" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_an_unsharded_review_is_not_a_partial(pr):
    unsharded, _, _ = pr
    with pytest.raises(ShardError, match="not a partial review"):
        merge([unsharded])


def test_post_refuses_a_partial_review(pr, tmp_path, capsys):
    _, partials, _ = pr
    path = tmp_path / "partial.json"
    path.write_text(dump(partials[0]))
    assert main(["post", str(path), "--pr", "1", "--head-sha", partials[0].head_sha]) == 2
    assert "graphmend merge" in capsys.readouterr().err


def test_scan_shards_merged_give_the_unsharded_sarif_and_a_missing_one_is_named(tmp_path, capsys):
    root, _ = make_base(tmp_path)
    from tests.support.affected_repo import CONFIG

    one_target = CONFIG.replace("  - {name: tb, entry: 'tools.targets:tb', device: cpu, backend: eager}\n", "")
    assert one_target != CONFIG  # a single target keeps the test fast: one shard runs it, the other the static pass
    commit(root, {"graphmend.yml": one_target, "src/a.py": MODEL_A_BROKEN, "src/loose.py": "import torch\n\n\n@torch.compile\ndef f(x):\n    print(x)\n"
                                                                 "    return x\n"})
    whole = tmp_path / "whole.sarif"
    assert main(["scan", "-C", str(root), "--no-fix", "--sarif", str(whole)]) == 1
    parts = []
    for i in (1, 2):
        parts.append(tmp_path / f"part{i}.json")
        assert main(["scan", "-C", str(root), "--shard", f"{i}/2", "--partial", str(parts[-1])]) == 0
    assert [json.loads(p.read_text())["shard"]["plan"] for p in parts] == [[["ta"], []]] * 2
    merged = tmp_path / "merged.sarif"
    capsys.readouterr()

    assert main(["merge", *map(str, parts), "--sarif", str(merged), "--summary", str(tmp_path / "s.md")]) == 1

    def results(path):
        return sorted(json.dumps(r, sort_keys=True) for r in json.loads(path.read_text())["runs"][0]["results"])

    assert results(merged) == results(whole)
    found = json.loads(merged.read_text())["runs"][0]["results"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in found} == {"src/a.py", "src/loose.py"}

    capsys.readouterr()
    assert main(["merge", str(parts[1]), "--sarif", str(tmp_path / "half.sarif")]) == 1
    assert "shard 1/2 did not report" in capsys.readouterr().err
    assert json.loads((tmp_path / "half.sarif").read_text())["runs"][0]["results"] == []
    data = json.loads(parts[0].read_text())
    data["commit"] = "f" * 40
    parts[0].write_text(json.dumps(data))
    assert main(["merge", *map(str, parts), "--sarif", str(tmp_path / "x.sarif")]) == 2
    assert "another commit" in capsys.readouterr().err
