"""`graphmend post` must run where torch is not installed: the posting job holds a token
and never needs the engine. A meta-path hook makes any import of torch (or libcst) fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.bot.conftest import REPO_NAME, TOKEN, pr_review, write_review

REPO = Path(__file__).resolve().parents[2]

FORBID = r'''
import sys
class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "libcst"):
            raise ImportError(f"{name} is forbidden in graphmend post")
        return None
sys.meta_path.insert(0, Forbid())
from graphmend.cli import main
code = main(sys.argv[1:])
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "libcst"))
print("IMPORTED", bad)
sys.exit(code)
'''


def test_post_runs_without_torch(github, pr_repo, tmp_path):
    review = write_review(tmp_path, pr_review(pr_repo.base, pr_repo.head))
    env = dict(os.environ, GITHUB_TOKEN=TOKEN, GITHUB_API_URL=github.url, PYTHONPATH=str(REPO))
    env.pop("GITHUB_STEP_SUMMARY", None)
    proc = subprocess.run(
        [sys.executable, "-c", FORBID, "post", str(review), "--repo", REPO_NAME, "--pr", "1", "--head-sha", pr_repo.head,
         "--summary", str(tmp_path / "s.md")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr  # the gate fails: the PR adds breaks
    assert "IMPORTED []" in proc.stdout
    assert len(github.reviews_of(1)) == 1 and len(github.comments_of(1)) == 3 and github.state.check_runs
