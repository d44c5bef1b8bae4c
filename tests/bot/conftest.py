"""Fixtures for the bot's tests: a real git repository with a pull request's two commits, a
running local GitHub API server that knows it, and review.json documents describing it."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.github_server import GitHubServer

REPO_NAME = "octo/models"
TOKEN = "ghs_writetoken"
RO_TOKEN = "ghs_readonlytoken"

BASE_MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return h
'''

# The pull request adds two fixable breaks (a tensor-valued `if`, a validation guard) and one
# that no rule fixes (a dynamic-shape operator).
HEAD_MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        if (h > 1e6).any():
            raise ValueError("activation overflow")
        n = torch.nonzero(h).shape[0]
        return h + n
'''

# A later commit on the same pull request that applies both fixes and drops the nonzero.
FOLLOW_UP_MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        h = torch.where(h.sum() > 0, h * 2, h - 1)
        torch._assert_async(~(h > 1e6).any(), "activation overflow")
        return h
'''

UTIL_BASE = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(20))


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def commit_all(root: Path, message: str) -> str:
    """Commit everything under ``root`` (``git add -A``) and return the new commit's sha."""
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


@dataclass
class PrRepo:
    root: Path
    base: str
    head: str

    def commit(self, files: dict[str, str], message: str = "follow-up") -> str:
        for rel, text in files.items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        return commit_all(self.root, message)


@pytest.fixture
def pr_repo(tmp_path: Path) -> PrRepo:
    root = tmp_path / "models"
    root.mkdir()
    (root / "src").mkdir()
    (root / "src" / "model.py").write_text(BASE_MODEL)
    (root / "src" / "util.py").write_text(UTIL_BASE)
    git(root, "init", "-q", "-b", "main")
    base = commit_all(root, "base")
    git(root, "checkout", "-q", "-b", "feature")
    (root / "src" / "model.py").write_text(HEAD_MODEL)
    head = commit_all(root, "head")
    return PrRepo(root, base, head)


@pytest.fixture
def server():
    with GitHubServer() as gh:
        gh.add_user(TOKEN, "graphmend[bot]")
        gh.add_user(RO_TOKEN, "github-actions[bot]", can_write=False, can_write_checks=False)
        yield gh
        assert gh.state.violations == [], "\n".join(gh.state.violations)


@pytest.fixture
def github(server, pr_repo):
    """The server with the repository and its pull request #1 open."""
    server.add_repo(REPO_NAME, str(pr_repo.root))
    server.open_pull(REPO_NAME, pr_repo.base, pr_repo.head)
    return server


# ---------------------------------------------------------------------------------------------
# review.json documents


def verification(status: str = "passed", before: int = 3, after: int = 2) -> dict[str, Any]:
    return {"status": status, "detail": "outputs equal on 2 inputs (eager and compiled)", "max_error": 0.0,
            "breaks_before": before, "breaks_after": after}


def finding(fp: str, line: int, reason: str, *, status: str = "introduced", gb_id: Optional[str] = "GB0170",
            rule: Optional[str] = None, fix: Optional[dict] = None, decline: Optional[str] = None,
            file: str = "src/model.py", target: Optional[str] = "tiny", category: str = "data-dependent-branch") -> dict:
    return {"fingerprint": fp, "status": status, "baselined": False, "file": file, "line": line, "reason": reason,
            "gb_id": gb_id, "category": category, "rule": rule, "target": target, "verified": target is not None,
            "fix": fix, "decline": decline}


FP_BRANCH = "a1" * 10
FP_GUARD = "b2" * 10
FP_NONZERO = "c3" * 10


def pr_review(base: str, head: str, **settings: Any) -> dict[str, Any]:
    """What `graphmend pr` reports on HEAD_MODEL: two verified single-range fixes, one decline."""
    return {
        "version": 1,
        "base_sha": base,
        "head_sha": head,
        "settings": {"safety": "safe", "suggestions": True, "comment": "on-change", "fail_on": "new-breaks", **settings},
        "stages": [{"name": n, "ran": True, "reason": ""} for n in ("base", "check", "fix", "verify")]
        + [{"name": "bench", "ran": False, "reason": "bench is not enabled"}],
        "targets": [{"name": "tiny", "base": {"break_count": 0, "graph_count": 1, "error": None},
                     "head": {"break_count": 3, "graph_count": 4, "error": None},
                     "benchmark": {"cold_start_before_s": 2.5, "cold_start_after_s": 0.9, "steady_before_ms": 1.2,
                                   "steady_after_ms": 0.8, "speedup": 1.5, "max_error": 0.0,
                                   "speedup_ci": [1.3, 1.7], "verdict": "faster"}}],
        "findings": [
            finding(FP_BRANCH, 11, "Data-dependent branching: generic_jump TensorVariable()", gb_id="GB0170", rule="GM101",
                    fix={"rule": "GM101", "title": "predicate the branch with torch.where", "safety": "safe",
                         "edits": [{"file": "src/model.py", "start_line": 11, "end_line": 14,
                                    "new_text": "        h = torch.where(h.sum() > 0, h * 2, h - 1)\n",
                                    "old_text": "        if h.sum() > 0:\n            h = h * 2\n        else:\n            h = h - 1\n"}],
                         "verification": verification(before=3, after=2), "benchmark": None}),
            finding(FP_GUARD, 15, "Data-dependent branching: generic_jump TensorVariable()", gb_id="GB0170", rule="GM301",
                    category="validation",
                    fix={"rule": "GM301", "title": "lower the guard to torch._assert_async", "safety": "safe",
                         "edits": [{"file": "src/model.py", "start_line": 15, "end_line": 16,
                                    "new_text": '        torch._assert_async(~(h > 1e6).any(), "activation overflow")\n',
                                    "old_text": '        if (h > 1e6).any():\n            raise ValueError("activation overflow")\n'}],
                         "verification": verification(before=3, after=2), "benchmark": None}),
            finding(FP_NONZERO, 17, "Dynamic shape operator: aten.nonzero.default", gb_id="GB0036", rule=None,
                    category="dynamic-shape",
                    decline="nonzero has a data-dependent output shape; set capture_dynamic_output_shape_ops=True"),
        ],
        "errors": [],
    }


def write_review(tmp_path: Path, data: dict, name: str = "review.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path
