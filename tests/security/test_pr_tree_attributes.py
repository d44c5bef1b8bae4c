"""The tree ``pr`` analyses is the pull request's commit, byte for byte, whatever its
``.gitattributes`` say.

``git archive`` applies the archived tree's own attributes: ``export-ignore`` leaves files out,
``export-subst`` rewrites ``$Format:…$`` placeholders, ``ident`` expands ``$Id$``, ``eol`` and
``working-tree-encoding`` convert the text. A pull request that adds a ``.gitattributes`` line
thereby had its code analysed as something other than what it merges: here a module reads
``"$Format:$"`` (the empty string in the analysed tree, a true value in the repository) and takes
a tensor-valued branch only outside the analysis, so the gate passed a new graph break (``analyse``
on that pull request: 0 breaks at the head, verdict passed; measured, not run here: two Dynamo runs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from graphmend.pr import analyse
from graphmend.trees import export_rev
from tests.bot.conftest import commit_all, git
from tests.bot.test_pr import HEAD, repo_with_target

ATTRIBUTES = "src/model.py export-subst ident eol=crlf\nsrc/extra.py export-ignore\n"
HIDDEN = HEAD.replace("model = torch.compile(Model())\n", "").replace(
    "        if h.sum() > 0:\n", '        if "$Format:$" and h.sum() > 0:  # $Id$\n')


def test_the_exported_tree_is_the_commit_s_blobs(tmp_path):
    root, _base = repo_with_target(tmp_path)
    (root / ".gitattributes").write_text(ATTRIBUTES)
    (root / "src" / "model.py").write_text(HIDDEN)
    (root / "src" / "extra.py").write_text("x = 1\n")
    head = commit_all(root, "head")
    dest = tmp_path / "tree"
    dest.mkdir()
    export_rev(root, head, dest, as_committed=True)
    listed = git(root, "ls-tree", "-r", "--name-only", head).splitlines()
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(listed)
    for rel in listed:
        blob = subprocess.run(["git", "cat-file", "blob", f"{head}:{rel}"], cwd=root, capture_output=True, check=True).stdout
        assert (dest / rel).read_bytes() == blob, rel


def test_a_pull_request_s_export_ignore_does_not_hide_its_new_break_from_the_gate(tmp_path):
    # Static analysis only (no targets): the head's model gains a tensor-valued branch, and its
    # .gitattributes leaves the file out of what the analysis used to see.
    from tests.bot.test_pr import make_pr

    root, base, _head = make_pr(tmp_path)
    (root / ".gitattributes").write_text("src/model.py export-ignore\n")
    head = commit_all(root, "head: and keep the model out of the analysis")
    result = analyse(root, base, head, cache_dir=None, propose_fixes=False)
    assert ("introduced", "GM101", 11) in {(f.status, f.rule, f.line) for f in result.review.findings}
    assert result.verdict.passed is False
