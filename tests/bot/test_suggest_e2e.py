"""The done-when check of one-click fixes, end to end and for real: a pull request that adds a
``print``, a ``logger.warning_once``, a tensor ``if``, a tensor conditional expression and a
guarded ``raise`` is analysed by ``graphmend pr`` (real Dynamo, verification on two targets),
posted by ``graphmend post`` to the local GitHub API server, and the posted suggestions are
applied the way GitHub applies them (lines ``start_line..line`` of the RIGHT side replaced).
Every verified fix must be a one-click suggestion (only a whole new file may not be), and the
suggestions plus that file must give exactly the tree ``graphmend fix`` writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from graphmend.cli import main
from tests.bot.conftest import TOKEN, commit_all, git

LOGGING_UTILS = '''import functools
import logging


@functools.lru_cache(None)
def warning_once(self, *args, **kwargs):
    self.warning(*args, **kwargs)


logging.Logger.warning_once = warning_once


def get_logger(name):
    return logging.getLogger(name)
'''

TARGETS = '''import torch

from pkg.model import Guard, Model


def _frozen(module):
    for p in module.parameters():
        p.requires_grad_(False)
    return module.eval()


def tiny():
    torch.manual_seed(0)
    return _frozen(Model()), (torch.randn(2, 4),)


def guard():
    return _frozen(Guard()), (torch.randn(2, 4),)
'''

CONFIG = '''paths: [pkg/]
targets:
  - name: tiny
    entry: tools.targets:tiny
    device: cpu
    backend: eager
  - name: guard
    entry: tools.targets:guard
    device: cpu
    backend: eager
'''

BASE_MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return h


class Guard(torch.nn.Module):
    def forward(self, x):
        return x + 1
'''

HEAD_MODEL = '''import torch

from pkg.logging_utils import get_logger

logger = get_logger(__name__)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("h", h.shape)  # a size: made from a failed trace too (a tensor value would be left as written: `h.sum() > 0` after it may fail while tracing)
        logger.warning_once("scaling activations")
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        s = h * 3 if h.mean() > 0 else h * 0.5
        return s


class Guard(torch.nn.Module):
    def forward(self, x):
        if (x > 1e6).any():
            raise ValueError("activation overflow")
        return x + 1
'''


def make_pull(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "repo"
    files = {"pkg/__init__.py": "", "pkg/logging_utils.py": LOGGING_UTILS, "pkg/model.py": BASE_MODEL,
             "tools/__init__.py": "", "tools/targets.py": TARGETS, "graphmend.yml": CONFIG}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    base = commit_all(root, "base")
    git(root, "checkout", "-q", "-b", "feature")
    (root / "pkg/model.py").write_text(HEAD_MODEL)
    return root, base, commit_all(root, "head")


def suggestion_blocks(body: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(`{3,})suggestion\n(.*?)^\1$", body, re.S | re.M)]


def apply_as_github(text: str, comments) -> str:
    """Commit every suggestion in one batch: each replaces RIGHT-side lines start_line..line of
    the head; GitHub refuses a batch whose suggestions overlap."""
    ranges = sorted(((c.start_line or c.line, c.line, suggestion_blocks(c.body)) for c in comments), reverse=True)
    lines = text.splitlines(keepends=True)
    previous_start = len(lines) + 1
    for start, end, blocks in ranges:
        if not blocks:
            continue
        [block] = blocks
        assert end < previous_start, "two suggestions touch one line: GitHub cannot apply them in one batch"
        lines[start - 1 : end] = [block]
        previous_start = start
    return "".join(lines)


@pytest.mark.slow
def test_every_verified_fix_is_one_click_and_gives_graphmend_fix_s_tree(tmp_path, server, monkeypatch, capsys):
    root, base, head = make_pull(tmp_path)
    review_path = tmp_path / "review.json"
    assert main(["pr", "-C", str(root), "--base", base, "--head", head, "-o", str(review_path), "--no-cache"]) == 1
    data = json.loads(review_path.read_text())
    fixed = {f["fingerprint"]: f for f in data["findings"] if f["fix"] and f["fix"]["verification"]["status"] == "passed"}
    assert sorted(f["rule"] for f in fixed.values()) == ["GM101", "GM201", "GM202", "GM301", "GM402"], data["findings"]

    server.add_repo("octo/models", str(root))
    server.open_pull("octo/models", base, head)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert main(["post", str(review_path), "--repo", "octo/models", "--pr", "1", "--head-sha", head,
                 "--api-url", server.url]) == 1
    capsys.readouterr()

    comments = server.comments_of(1)
    with_suggestion = [c for c in comments if suggestion_blocks(c.body)]
    from bot.markers import find_finding

    # every verified fix is one-click: its comment carries its suggestion, or names the one that
    # carries it (an edit fixes share, such as the runtime, is posted once)
    for fp in fixed:
        mine = [c for c in comments if find_finding(c.body) == fp]
        assert mine and all(suggestion_blocks(c.body) or "carries this fix too" in c.body for c in mine), \
            [c.body[:400] for c in mine]
    assert "No suggestion" not in "".join(c.body for c in comments if find_finding(c.body) in fixed)
    [review] = server.reviews_of(1)
    new_files = {fc["path"]: fc for f in fixed.values() for fc in f["fix"].get("files") or []}
    listed = re.findall(r"^- (.*)$", review.body.split("**Not one-click**")[1].split("<details>")[0], re.M) if "**Not one-click**" in review.body else []
    # the review body lists only what cannot be a suggestion: the new files, with why
    assert len([x for x in listed if x.startswith("new file")]) == len(new_files)
    assert all("a suggestion cannot create" in x for x in listed if x.startswith("new file"))
    assert [x for x in listed if not x.startswith("new file") and "one-click suggestion" not in x] == []

    # the suggestions (plus the new files) give exactly what `graphmend fix` writes
    head_text = (root / "pkg/model.py").read_text()
    suggested = apply_as_github(head_text, with_suggestion)
    clone = tmp_path / "fixed"
    shutil.copytree(root, clone)
    # `graphmend pr` verified every one of these fixes already; verifying them again in the fix
    # loop would only double the test's time (the tree is the same when all verify).
    main(["fix", "-C", str(clone), "--no-verify"])  # 1 when a break no rule fixes is left
    capsys.readouterr()
    assert suggested == (clone / "pkg/model.py").read_text()
    for path, fc in new_files.items():
        assert fc["new_text"] == (clone / path).read_text()
    changed = git(clone, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(line.split(maxsplit=1)[1] for line in changed) == sorted(["pkg/model.py", *new_files])
