"""Materialising trees: the tree at a revision (also from a sub-folder), working-tree copies."""

from __future__ import annotations

import pytest

from graphmend.trees import TreeError, copy_tree, tree_at
from tests.conftest import git


def test_tree_at_revision_subfolder_and_copy(make_repo, tmp_path):
    root = make_repo({"a.py": "one\n", "sub/b.py": "two\n", ".gitignore": "ignored/\n"})
    (root / "a.py").write_text("changed\n")
    git(root, "commit", "-qam", "second")
    first = git(root, "rev-list", "--max-parents=0", "HEAD").strip()
    (root / "a.py").write_text("uncommitted\n")
    (root / "new.py").write_text("untracked\n")
    (root / "ignored").mkdir()
    (root / "ignored/big.bin").write_text("x")

    with tree_at(root, first) as before:
        assert (before / "a.py").read_text() == "one\n" and (before / "sub/b.py").read_text() == "two\n"
        assert not (before / ".git").exists()
    assert not before.exists()  # removed on exit
    with tree_at(root, "HEAD") as head:
        assert (head / "a.py").read_text() == "changed\n"
    with tree_at(root / "sub", "HEAD") as sub:
        assert (sub / "b.py").read_text() == "two\n" and not (sub / "a.py").exists()
    with pytest.raises(TreeError, match="unknown revision"):
        with tree_at(root, "does-not-exist"):
            pass

    copy = copy_tree(root, tmp_path / "copy")
    assert (copy / "a.py").read_text() == "uncommitted\n" and (copy / "new.py").exists()
    assert not (copy / "ignored").exists() and not (copy / ".git").exists()


def test_copy_of_a_subfolder_and_of_a_plain_folder(make_repo, tmp_path):
    root = make_repo({"sub/b.py": "two\n", "sub/.gitignore": "*.log\n"})
    (root / "sub/x.log").write_text("noise")
    copy = copy_tree(root / "sub", tmp_path / "c1")
    assert (copy / "b.py").exists() and not (copy / "x.log").exists()
    plain = tmp_path / "plain"
    (plain / "__pycache__").mkdir(parents=True)
    (plain / "m.py").write_text("m\n")
    copy = copy_tree(plain, tmp_path / "c2")
    assert (copy / "m.py").exists() and not (copy / "__pycache__").exists()
