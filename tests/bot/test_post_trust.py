"""`graphmend post` believes GitHub, not the artifact: review.json comes from a job that ran the
pull request's code, so the policy, the baseline, the verdict and the paths it may post on are
recomputed from what GitHub says about the pull request and its base branch."""

from __future__ import annotations

import json

from tests.bot.conftest import FP_BRANCH, FP_GUARD, FP_NONZERO, finding, pr_review, write_review
from tests.bot.test_post_scenarios import base_with_config, event_file, post


def test_a_review_json_that_baselines_everything_and_switches_the_gate_off_still_fails(
        monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head, fail_on="never")
    for f in data["findings"]:
        f["baselined"] = True
    data["verdict"] = "passed"
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert code == 1 and result["passed"] is False and result["new"] == 3
    [run] = github.state.check_runs
    assert run.conclusion == "failure"
    for line in ("`src/model.py:11`", "`src/model.py:15`", "`src/model.py:17`", "review.json"):
        assert line in run.summary


def test_the_base_branchs_baseline_and_policy_are_read_through_the_api(monkeypatch, capsys, github, pr_repo, tmp_path):
    baseline = json.dumps({"version": 1, "fingerprints": [FP_BRANCH, FP_GUARD, FP_NONZERO]})
    # the baseline sits on the base branch only: the head never sees it
    number, base = base_with_config(pr_repo, github, "gate:\n  baseline: .github/accepted.json\n",
                                    **{".github/accepted.json": baseline})
    review = write_review(tmp_path, pr_review(base, pr_repo.head))
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head,
                           event=event_file(tmp_path, number, pr_repo.head))
    assert code == 0 and result["passed"] is True and result["new"] == 0
    assert ("GET", "/repos/octo/models/contents/.github/accepted.json", 200) in github.state.log


def test_paths_outside_the_repository_are_never_posted(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head)
    evil_fix = {"rule": "GM101", "title": "t", "safety": "safe",
                "edits": [{"file": "../../etc/passwd", "start_line": 1, "end_line": 1, "new_text": "root::0:0::/:/bin/sh\n",
                           "old_text": "x\n"}],
                "verification": {"status": "passed"}, "benchmark": None}
    data["findings"].append(finding("d4" * 10, 1, "a break", file="../../etc/passwd", fix=evil_fix))
    data["findings"].append(finding("e5" * 10, 1, "a break", file="src/./model.py"))
    # a real finding whose fix also edits a file outside the pull request
    data["findings"][0]["fix"]["edits"].append(dict(data["findings"][0]["fix"]["edits"][0], file="src/util.py"))
    code, result, _ = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head)
    assert code == 1
    posted = [r.body for r in github.reviews_of(1)] + [c.body for c in github.comments_of(1)]
    posted += [c.body for c in github.issue_comments_of(1)] + [github.state.check_runs[0].summary]
    assert not any("passwd" in text or "src/./model.py" in text for text in posted)
    assert {a["path"] for a in github.state.check_runs[0].annotations} == {"src/model.py"}
    assert {c.path for c in github.comments_of(1)} == {"src/model.py"}
    assert not any("torch.where(h.sum() > 0" in c.body for c in github.comments_of(1))  # its fix was dropped
    assert any("not repository-relative" in n for n in result["notes"])


def test_the_workflows_own_flags_override_the_base_branchs_review_settings(monkeypatch, capsys, github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    code, _, _ = post(monkeypatch, capsys, github, tmp_path, review, pr_repo.head, extra=("--comment", "never"))
    assert code == 1 and github.issue_comments_of(1) == [] and len(github.reviews_of(1)) == 1


def test_review_json_may_ask_for_less_never_for_more(monkeypatch, capsys, github, pr_repo, tmp_path):
    quiet = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head, comment="never", suggestions=False), "q.json")
    post(monkeypatch, capsys, github, tmp_path, quiet, pr_repo.head)
    assert github.issue_comments_of(1) == []  # quieter than the defaults: honoured
    assert not any("```suggestion" in c.body for c in github.comments_of(1))


def test_without_a_token_review_json_cannot_loosen_the_gate(monkeypatch, capsys, github, pr_repo, tmp_path):
    data = pr_review(pr_repo.base, pr_repo.head, fail_on="never")
    for f in data["findings"]:
        f["baselined"] = True
    code, result, out = post(monkeypatch, capsys, github, tmp_path, write_review(tmp_path, data), pr_repo.head, token="")
    assert code == 1 and result["new"] == 3 and out.count("::error ") == 3
    assert github.state.log == []
