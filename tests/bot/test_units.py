"""The bot's pure parts: diff parsing, the diff filter, the gate, review.json, retries, markers."""

from __future__ import annotations

import json

import pytest

from bot import markers, retry
from bot.diff import parse_files, parse_patch
from bot.diff_filter import plan_review
from bot.gate import apply_baseline, baseline_fingerprints, compute_verdict
from bot.review import ReviewError, dump, from_json
from tests.bot.conftest import FP_BRANCH, FP_GUARD, FP_NONZERO, finding, pr_review

BASE, HEAD = "1" * 40, "2" * 40
PATCH = "@@ -8,4 +8,11 @@ class Model(torch.nn.Module):\n \n     def forward(self, x):\n         h = self.lin(x)\n+        if h.sum() > 0:\n+            h = h * 2\n+        else:\n+            h = h - 1\n+        if (h > 1e6).any():\n+            raise ValueError(\"activation overflow\")\n+        n = torch.nonzero(h).shape[0]\n+        return h + n\n-        return h"


def test_patch_lines_and_hunks():
    f = parse_patch("src/model.py", PATCH)
    assert [(h.start, h.end) for h in f.hunks] == [(8, 18)]
    assert f.hunks[0].added == frozenset(range(11, 19))
    assert f.range_in_one_hunk(11, 14) and not f.range_in_one_hunk(17, 19) and f.hunk_of(7) is None
    two = parse_patch("a.py", "@@ -1,2 +1,2 @@\n-a\n+b\n c\n@@ -10,2 +10,2 @@\n x\n-y\n+z")
    assert [(h.start, h.end) for h in two.hunks] == [(1, 2), (10, 11)] and not two.range_in_one_hunk(2, 10)
    assert parse_patch("bin.dat", None).hunks == () and not parse_patch("bin.dat", None).has_patch


def review(**changes):
    data = pr_review(BASE, HEAD)
    data["settings"].update(changes)
    return data


def test_plan_places_suggestions_only_for_verified_allowed_single_range_fixes():
    diff = parse_files([("src/model.py", "modified", PATCH)])
    plan = plan_review(from_json(review()), diff)
    assert [(p.finding.fingerprint, p.suggest, p.start_line, p.line) for p in plan.inline] == [
        (FP_BRANCH, True, 11, 14), (FP_GUARD, True, 15, 16), (FP_NONZERO, False, 17, 17)]
    data = review()
    data["findings"][0]["fix"]["verification"]["status"] = "failed"
    data["findings"][1]["fix"]["safety"] = "unsafe"
    plan = plan_review(from_json(data), diff)
    assert [p.suggest for p in plan.inline] == [False, False, False]
    assert "did not pass verification" in plan.inline[0].note and "unsafe" in plan.inline[1].note
    assert plan.patches == ()
    plan = plan_review(from_json(review(safety="unsafe")), diff)
    assert [p.suggest for p in plan.inline] == [True, True, False]
    assert [p.suggest for p in plan_review(from_json(review(suggestions=False)), diff).inline] == [False, False, False]


def test_multi_place_fix_becomes_a_patch_and_cap_moves_the_rest_to_the_body():
    data = review()
    data["findings"][0]["fix"]["edits"].append({"file": "src/model.py", "start_line": 1, "end_line": 0,
                                                "new_text": "import logging\n", "old_text": ""})
    diff = parse_files([("src/model.py", "modified", PATCH)])
    plan = plan_review(from_json(data), diff)
    assert plan.inline[0].suggest is False and [p.finding.fingerprint for p in plan.patches] == [FP_BRANCH]
    capped = plan_review(from_json(data), diff, max_inline=1)
    assert len(capped.inline) == 1 and len(capped.body) == 2


def test_gate_verdicts():
    r = from_json(review())
    assert compute_verdict(r).passed is False and compute_verdict(r).new == 3
    assert compute_verdict(r, "never").passed is True
    accepted = apply_baseline(r, {FP_BRANCH, FP_GUARD, FP_NONZERO})
    assert compute_verdict(accepted).passed is True and compute_verdict(accepted).accepted == 3
    data = review()
    data["findings"] = [finding("9" * 20, 3, "old", status="unchanged")]
    assert compute_verdict(from_json(data)).passed is True
    assert compute_verdict(from_json(data), "any-break").passed is False
    data["targets"][0]["head"]["error"] = "ImportError: no module named foo"
    assert compute_verdict(from_json(data)).passed is False  # a crashed target is never green
    assert baseline_fingerprints(json.dumps({"breaks": [{"fingerprint": "ab"}], "fingerprints": ["cd"]})) == {"ab", "cd"}


def test_review_json_schema_and_round_trip():
    r = from_json(review())
    assert from_json(json.loads(dump(r))) == r
    for mutate, where in [
        (lambda d: d.update(head_sha="HEAD"), "head_sha"),
        (lambda d: d.update(extra=1), "(top level)"),
        (lambda d: d["findings"][0].update(gb_id="GB1; rm -rf"), "findings/0/gb_id"),
        (lambda d: d["findings"][0].update(fingerprint="<b>"), "findings/0/fingerprint"),
        (lambda d: d["targets"][0].update(name='x"] --> evil'), "targets/0/name"),
        (lambda d: d["findings"][0].update(file="/etc/passwd"), "findings/0/file"),
    ]:
        data = review()
        mutate(data)
        with pytest.raises(ReviewError, match=where.replace("(", r"\(").replace(")", r"\)")):
            from_json(data)


def test_retry_reads_and_rechecks_writes():
    slept: list[float] = []
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            raise retry.TransientError("502", wait_s=1)
        return "ok"

    assert retry.read(flaky, sleep=slept.append) == "ok" and slept == [1, 1]
    posted = []

    def write():
        posted.append(1)
        raise retry.TransientError("502 after the write happened", wait_s=1)

    assert retry.write(write, recheck=lambda: 77, sleep=slept.append) == 77 and posted == [1]
    with pytest.raises(retry.TransientError):
        retry.read(lambda: (_ for _ in ()).throw(retry.TransientError("down")), retry.Policy(attempts=2), sleep=slept.append)
    assert retry.Policy(max_wait_s=5).wait(retry.TransientError("limited", wait_s=60), 0) == 5


def test_markers_round_trip_and_reject_non_hex():
    assert markers.find_finding(markers.finding_marker("ab12")) == "ab12"
    assert markers.find_review("x " + markers.review_marker(HEAD)) == HEAD
    with pytest.raises(ValueError):
        markers.finding_marker("--> <script>")
