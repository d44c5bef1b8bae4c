"""Source that would crash or hang the parser is that file's error, and the run goes on.

libcst's parser recurses on the C stack (a 100,000-deep unary expression is a segfault) and
takes quadratic time on a long operator chain (a 30,000-term sum does not finish). The runs are
child processes, so a crash is seen as an exit status rather than taking pytest down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEADER = "import torch\n\n"
GOOD = "import torch\n\n@torch.compile\ndef f(x):\n    print('x')\n    return x\n"


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "good.py").write_text(GOOD)
    (root / "pkg" / "deep.py").write_text(HEADER + "x = " + "-" * 100_000 + "1\n")
    (root / "pkg" / "long_sum.py").write_text(HEADER + "x = " + " + ".join(["torch.ones(1)"] * 30_000) + "\n")
    (root / "graphmend.yml").write_text("paths: [pkg/]\n")
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphmend", *args, "-C", str(root)], capture_output=True,
                          text=True, timeout=120)


def test_check_reports_one_error_per_hostile_file_and_checks_the_rest(tmp_path):
    done = _run(_repo(tmp_path), "check", "--format", "json")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    report = json.loads(done.stdout)
    errors = {e["path"]: e["message"] for e in report["errors"]}
    assert "nested more than 100 deep at line 3" in errors["pkg/deep.py"]
    assert "more than 1000 operators at line 3" in errors["pkg/long_sum.py"]
    assert all("\n" not in m and len(m) < 300 for m in errors.values())
    assert any(b["file"] == "pkg/good.py" for b in report["static"])


def test_fix_goes_on_past_hostile_files(tmp_path):
    root = _repo(tmp_path)
    before = (root / "pkg" / "deep.py").read_text()
    done = _run(root, "fix", "--unsafe-fixes")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "pkg/deep.py: not parsed: nested more than 100 deep" in done.stderr
    assert "pkg/long_sum.py: not parsed:" in done.stderr
    assert (root / "pkg" / "deep.py").read_text() == before
    assert "_graphmend_deferred(print" in (root / "pkg" / "good.py").read_text()


def test_real_code_is_within_bounds():
    import graphmend
    from graphmend.sources import parse_bounds

    for path in Path(graphmend.__file__).parent.rglob("*.py"):
        assert parse_bounds(path.read_text(encoding="utf-8")) == "", path
    # long flat literals are not chains: a list of 30,000 negative numbers parses in linear time
    assert parse_bounds("x = [" + ", ".join(["-1"] * 30_000) + "]\n") == ""
