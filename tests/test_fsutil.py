"""Atomic writes: a `graphmend fix` killed while it writes a large file leaves the old file or
the new one, never a truncated one; modes and links survive a rewrite."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from graphmend import fsutil

GOOD = "import torch\n\n@torch.compile\ndef f(x):\n    print('x')\n    return x\n"
BLOB = 'DATA = """\n' + ("x" * 99 + "\n") * 2_000 + '"""\n'  # 200 KB: several pieces to write


def _repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "big.py").write_text(GOOD + BLOB)
    (root / "graphmend.yml").write_text("paths: [pkg/]\n")
    return root / "pkg" / "big.py"


def _fix_interrupted(root: Path, sig: signal.Signals) -> int:
    """`graphmend fix` on ``root``, sent ``sig`` while a file in ``pkg/`` is half written."""
    done = subprocess.run([sys.executable, "-m", "tests.support.interrupt_writes", sig.name[3:], str(root / "pkg"),
                           "--", "fix", "--unsafe-fixes", "-C", str(root)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
    return done.returncode


def test_five_killed_fix_runs_never_leave_a_truncated_file(tmp_path):
    original = GOOD + BLOB
    for i, sig in enumerate([signal.SIGKILL, signal.SIGINT, signal.SIGKILL, signal.SIGINT, signal.SIGKILL]):
        root = tmp_path / f"run{i}"
        target = _repo(root)
        status = _fix_interrupted(root, sig)
        assert status != 0  # it was interrupted, not finished
        assert target.read_text() == original, f"run {i} ({sig.name}): {target.stat().st_size} bytes left"
        if sig == signal.SIGINT:
            assert sorted(os.listdir(target.parent)) == ["big.py"]  # no partial copy left behind


def test_mode_is_kept_and_new_files_get_the_umask_mode(tmp_path):
    script = tmp_path / "run.py"
    script.write_text("old\n")
    script.chmod(0o755)
    fsutil.write_text(script, "new\n")
    assert script.read_text() == "new\n" and stat.S_IMODE(script.stat().st_mode) == 0o755

    old = os.umask(0o022)
    try:
        fsutil.write_text(tmp_path / "fresh.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o644


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.py").write_text("a\n")
    (tmp_path / "link.py").symlink_to("real.py")
    fsutil.write_text(tmp_path / "link.py", "b\n")
    assert (tmp_path / "link.py").is_symlink() and (tmp_path / "real.py").read_text() == "b\n"


def test_a_failed_write_leaves_the_file_and_no_partial_copy(tmp_path, monkeypatch):
    target = tmp_path / "a.py"
    target.write_text("keep\n")

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        fsutil.write_text(target, "lost\n")
    assert target.read_text() == "keep\n" and os.listdir(tmp_path) == ["a.py"]
