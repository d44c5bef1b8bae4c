"""Every kind of unusable file gives one line naming it and the cause; the run goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphmend.config import Config
from graphmend.detect.static import detect_static
from graphmend.model import CheckReport
from graphmend.sources import SourceError, read_source

GOOD = "import torch\n\n@torch.compile\ndef f(x):\n    print('x')\n    return x\n"


def _repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "good.py").write_text(GOOD)
    outside = tmp_path / "secret.py"
    outside.write_text(GOOD)
    return root, outside


def test_each_bad_file_is_one_error_and_the_good_file_is_still_checked(tmp_path):
    root, outside = _repo(tmp_path)
    (root / "pkg" / "syntax.py").write_text("import torch\ndef f(x:\n    return x\n")
    (root / "pkg" / "latin1.py").write_bytes("import torch\n# caf\xe9\n".encode("latin-1"))
    (root / "pkg" / "binary.py").write_bytes(b"import torch\x00\x01\x02")
    (root / "pkg" / "escape.py").symlink_to(outside)
    (root / "pkg" / "dangling.py").symlink_to(root / "pkg" / "nowhere.py")
    (root / "pkg" / "inside_link.py").symlink_to(root / "pkg" / "good.py")
    result = detect_static(Config(root=root.resolve()))

    errors = {e.path: e.message for e in result.errors}
    assert set(errors) == {"pkg/syntax.py", "pkg/latin1.py", "pkg/binary.py", "pkg/escape.py", "pkg/dangling.py"}
    assert errors["pkg/syntax.py"].startswith("syntax error at line 2")
    assert errors["pkg/latin1.py"] == "not UTF-8 text (byte 0xe9 at line 2)"
    assert errors["pkg/binary.py"] == "binary file (contains NUL bytes)"
    assert errors["pkg/escape.py"].startswith("symlink leaves the repository") and "not followed" in errors["pkg/escape.py"]
    assert errors["pkg/dangling.py"] == "broken symlink"
    assert all("\n" not in m for m in errors.values())
    # the good file, and a symlink that stays inside the repository, are still checked
    assert sorted((b.file, b.line) for b in result.breaks) == [("pkg/good.py", 5), ("pkg/inside_link.py", 5)]
    # and the report says the run failed
    assert CheckReport(static=result.breaks, errors=result.errors).failed


def test_a_symlinked_folder_leaving_the_repository_is_not_followed(tmp_path):
    root, outside = _repo(tmp_path)
    (root / "vendor").symlink_to(outside.parent)
    with pytest.raises(SourceError) as info:
        read_source(root, "vendor/secret.py")
    assert str(info.value).startswith("vendor/secret.py: symlink leaves the repository")
    # walking the tree does not descend into it either
    assert {b.file for b in detect_static(Config(root=root.resolve())).breaks} == {"pkg/good.py"}


def test_unreadable_file(tmp_path, monkeypatch):
    root, _ = _repo(tmp_path)
    locked = root / "pkg" / "locked.py"
    locked.write_text(GOOD)
    if os.geteuid() != 0:
        locked.chmod(0)
    else:
        # root reads through permission bits, so make the read itself fail the way it would
        real = Path.read_bytes

        def read_bytes(self):
            if self.name == "locked.py":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = detect_static(Config(root=root.resolve()))
    assert [(e.path, e.message) for e in result.errors] == [("pkg/locked.py", "unreadable (Permission denied)")]
    assert [b.file for b in result.breaks] == ["pkg/good.py"]


def test_read_source_messages_name_the_file(tmp_path):
    root, _ = _repo(tmp_path)
    (root / "pkg" / "bom.py").write_bytes(b"\xef\xbb\xbfimport torch\n")
    assert read_source(root, "pkg/bom.py") == "import torch\n"
    with pytest.raises(SourceError, match=r"^pkg/none\.py: no such file$"):
        read_source(root, "pkg/none.py")
    with pytest.raises(SourceError, match=r"^\.\./secret\.py: symlink leaves the repository"):
        read_source(root, "../secret.py")
    with pytest.raises(SourceError, match="is a directory"):
        read_source(root, "pkg")


def test_files_without_torch_are_not_parsed(tmp_path):
    root, _ = _repo(tmp_path)
    # broken, but it never mentions the library: the pre-filter skips it before parsing
    (root / "pkg" / "notes.py").write_text("def f(:\n")
    result = detect_static(Config(root=root.resolve()))
    assert result.errors == () and result.files_scanned == 2 and result.files_parsed == 1
