"""A pull request cannot loosen its own sandbox through its graphmend.yml.

When the action is given a ``sandbox`` or ``image`` input, ``pr`` gets a merged copy of the
configuration with those inputs applied (``action.__main__.merged_config``), and the sandbox
section of that copy says where the pull request's code runs (``pr.scope_config``). The copy
was built from the checkout's graphmend.yml, which is the pull request's own: the code under
review chose its memory limit, its timeout and (without an ``image`` input) its container image.
Only the inputs and the base branch may say how the code runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from action import __main__ as entry
from action import settings
from graphmend.config import ConfigError
from graphmend.pr import scope_config
from tests.action.test_settings import env_for
from tests.bot.conftest import commit_all, git

BASE = "sandbox: {runner: subprocess, memory: 2g, timeout_s: 120, image: org/models-sandbox:2}\n"
HEAD = "sandbox: {runner: subprocess, memory: 100000g, timeout_s: 100000000, image: attacker/anything:latest}\n"


def _repo(tmp_path: Path, base_text: str = BASE) -> tuple[Path, str]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "graphmend.yml").write_text(base_text)
    git(root, "init", "-q", "-b", "main")
    base = commit_all(root, "base")
    (root / "graphmend.yml").write_text(HEAD)  # the checkout is the pull request's
    commit_all(root, "head: a roomier sandbox")
    return root, base


def test_the_sandbox_input_keeps_the_base_branch_s_limits(tmp_path):
    root, base = _repo(tmp_path)
    s = settings.load(env_for(root, sandbox="docker"))
    config, _accepted, _problem = scope_config(root, base, str(entry.merged_config(s)))
    sb = config.sandbox
    assert (sb.runner, sb.memory, sb.timeout_s, sb.image) == ("docker", "2g", 120, "org/models-sandbox:2")


def test_the_image_input_is_taken_and_nothing_else_of_the_checkout(tmp_path):
    root, base = _repo(tmp_path)
    s = settings.load(env_for(root, sandbox="docker", image="org/img:1"))
    config, _accepted, _problem = scope_config(root, base, str(entry.merged_config(s)))
    sb = config.sandbox
    assert (sb.runner, sb.memory, sb.timeout_s, sb.image) == ("docker", "2g", 120, "org/img:1")


def test_a_docker_sandbox_without_an_image_on_the_base_branch_is_an_error_not_the_checkout_s_image(tmp_path):
    root, base = _repo(tmp_path, "sandbox: {runner: subprocess, memory: 2g}\n")
    s = settings.load(env_for(root, sandbox="docker"))
    with pytest.raises(ConfigError, match="sandbox.image"):
        scope_config(root, base, str(entry.merged_config(s)))
