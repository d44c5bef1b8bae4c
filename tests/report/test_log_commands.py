"""Untrusted text printed into a GitHub Actions log cannot act as a workflow command: a target's
error or a file's message with "::add-mask::" or "::stop-commands::" at a line start is shown,
inert."""

from __future__ import annotations

import re
import subprocess
import sys

HOSTILE = "boom\\n::add-mask::hunter2\\n  ::stop-commands::pwned\\n##[set-env name=X;]1\\n::error file=a.py::fake"


def _command_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"^\s*(::|##\[)", line)]


def test_a_target_error_cannot_issue_workflow_commands(tmp_path):
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "targets.py").write_text(f"def make():\n    raise RuntimeError(\"{HOSTILE}\")\n")
    (root / "graphmend.yml").write_text("targets:\n  - name: t\n    entry: tools.targets:make\n    backend: eager\n")
    done = subprocess.run([sys.executable, "-m", "graphmend", "check", "-C", str(root), "--no-static"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "add-mask" in done.stderr and "hunter2" in done.stderr  # still shown, for the user to read
    assert _command_lines(done.stdout + done.stderr) == []


def test_neutralise_keeps_the_text_readable_and_leaves_other_lines_alone():
    from graphmend.report.github import neutralise

    text = "ok\n::add-mask::secret\n\t::warning::x\n##[group]y\nwith :: inside"
    out = neutralise(text)
    assert _command_lines(out) == []
    assert out.replace("\u200b", "") == text
    assert neutralise("plain\ntext") == "plain\ntext"
