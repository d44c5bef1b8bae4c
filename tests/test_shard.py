"""Sharding: ``pr --shard i/n`` analyses a balanced, deterministic share of the targets;
``merge`` joins the partials into the review an unsharded run writes, and a missing shard fails
the merged gate, named. Real Dynamo on a real repository (its base from a warm cache)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

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
    # a target with no recorded duration weighs as the median of the known ones
    assert sum(map(len, plan(["new", *durations], durations, 3))) == 13


@pytest.fixture(scope="module")
def pr(tmp_path_factory):
    """A pull request adding a break to src/a.py, with the base in a warm cache."""
    cache = tmp_path_factory.mktemp("cache")
    root, base = make_base(tmp_path_factory.mktemp("repo"))
    head = commit(root, {"src/a.py": MODEL_A_BROKEN})
    unsharded = analyse(root, base, head, cache_dir=cache, propose_fixes=False)  # also warms the cache
    partials = [analyse(root, base, head, cache_dir=cache, propose_fixes=False, shard=(i, 4)).review for i in range(1, 5)]
    return unsharded.review, partials


def _comparable(review) -> dict:
    data = to_dict(review)
    data.pop("timing")
    data.pop("shard", None)
    for t in data["targets"]:
        t.pop("duration_s")
    data["stages"] = [(s["name"], s["ran"]) for s in data["stages"]]  # notes say "1 of 2" vs "1 of 1"
    return data


def test_four_shards_merged_equal_the_unsharded_review(pr):
    unsharded, partials = pr
    assert all(p.shard is not None and p.shard.count == 4 for p in partials)
    assert sorted(n for p in partials for n in p.shard.plan[p.shard.index - 1]) == ["ta", "tb"]
    merged, problems, verdict = merge(partials)
    assert problems == []
    assert _comparable(merged) == _comparable(unsharded)
    assert not verdict.passed and verdict.new >= 1
    assert merged.timing.targets_analysed == 1 and merged.timing.targets_unaffected == 1


def test_a_missing_shard_fails_the_merged_gate_naming_it(pr, tmp_path, capsys):
    _, partials = pr
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


def test_partials_of_another_head_or_configuration_are_refused(pr, tmp_path, capsys):
    _, partials = pr
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
    unsharded, _ = pr
    with pytest.raises(ShardError, match="not a partial review"):
        merge([unsharded])
