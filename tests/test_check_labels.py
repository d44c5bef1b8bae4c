"""A label is a promise: ``check`` calls a break fixable only when the rule's legality analysis
produces the fix ``fix`` would apply, and advises a compile setting only after a run of the target
with it in force showed fewer breaks; otherwise it says why not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graphmend.check import label_breaks, unmatched_paths
from graphmend.config import parse_config
from graphmend.model import Category, GraphBreak, Lever

MODULE = textwrap.dedent('''\
    import torch


    def early(x):
        if x.sum() > 0:
            return x * 2
        y = x.sub_(1)  # an in-place write: the early return cannot become a select (GM101, GM102)
        return y


    def plain(x):
        x = torch.tanh(x)  # made here: the caller never gets its own tensor back from the select
        if x.sum() > 0:
            x = x * 2
        return x + 1


    def scalar(x, t):
        n = t.item()
        return x * float(str(n))


    def early_target(dtype=torch.float32, device="cpu"):
        return early, (torch.ones(3),)


    def scalar_target(dtype=torch.float32, device="cpu"):
        return scalar, (torch.ones(3), torch.tensor(2))
''')


def _branch(line: int, file: str = "pkg/m.py") -> GraphBreak:
    return GraphBreak(file=file, line=line, reason="Data-dependent branching", category=Category.DATA_DEPENDENT_BRANCH,
                      gb_type="Data-dependent branching", gb_id="GB0170", fixable=True, rule="GM101", lever=Lever.RULE,
                      lever_reason="both arms can be computed and one selected with torch.where", verified=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(MODULE)
    return tmp_path


def test_a_branch_the_rule_declines_is_not_fixable_and_says_why(repo):
    config = parse_config({"paths": ["pkg/"]}, root=repo)
    declined, fixed = label_breaks(config, [_branch(5), _branch(13)], verified=True)
    assert (declined.fixable, declined.rule, declined.lever) == (False, "GM101", Lever.NONE)
    assert declined.lever_reason.startswith("GM101 declined: `return` inside the branch")
    assert (fixed.fixable, fixed.rule, fixed.lever) == (True, "GM101", Lever.RULE)


def test_a_break_outside_the_repository_or_outside_paths_is_not_promised(repo, tmp_path):
    outside = label_breaks(parse_config({"paths": ["pkg/"]}, root=repo), [_branch(13, "/usr/lib/python3/x.py")], verified=True)[0]
    assert not outside.fixable and "outside the repository" in outside.lever_reason
    (repo / "other").mkdir()
    (repo / "other" / "m.py").write_text(MODULE)
    config = parse_config({"paths": ["pkg/"]}, root=repo)
    patch_only = label_breaks(config, [_branch(13, "other/m.py")], verified=True)[0]
    assert not patch_only.fixable and "outside `paths`" in patch_only.lever_reason and patch_only.rule == "GM101"


def test_the_configured_safety_decides(repo):
    """A rule whose fix is unsafe at a site is fixable only with `fix.safety: unsafe` (GM201 before a
    check the same graph may raise at: the records of a graph that raises are lost)."""
    (repo / "pkg" / "v.py").write_text(textwrap.dedent('''\
        import torch


        class M(torch.nn.Module):
            def forward(self, x):
                print("checking")
                if (x < 0).any():
                    raise ValueError("negative")
                return x
    '''))
    output = GraphBreak(file="pkg/v.py", line=6, reason="print", category=Category.SIDE_EFFECT, gb_type="GB0291",
                        fixable=True, rule="GM201", lever=Lever.RULE, verified=True)
    safe = label_breaks(parse_config({"paths": ["pkg/"]}, root=repo), [output], verified=True)[0]
    assert not safe.fixable and "GM201: unsafe fix: apply with --unsafe-fixes" in safe.lever_reason
    unsafe = label_breaks(parse_config({"paths": ["pkg/"], "fix": {"safety": "unsafe"}}, root=repo), [output], verified=True)[0]
    assert unsafe.fixable and unsafe.rule == "GM201"


def test_a_check_no_entry_reaches_is_not_fixable(repo):
    """GM301 on a check that no compiled entry of the file reaches: the runtime would keep the
    Python check under every entry, so there is nothing to apply, at any safety."""
    (repo / "pkg" / "v.py").write_text(textwrap.dedent('''\
        import torch


        def check(x):
            if (x < 0).any():
                raise ValueError("negative")
            return x
    '''))
    guard = GraphBreak(file="pkg/v.py", line=5, reason="Data-dependent branching", category=Category.VALIDATION,
                       gb_type="Data-dependent branching", fixable=True, rule="GM301", lever=Lever.RULE, verified=True)
    label = label_breaks(parse_config({"paths": ["pkg/"], "fix": {"safety": "unsafe"}}, root=repo), [guard], verified=True)[0]
    assert not label.fixable and "no compiled entry of this file is proven" in label.lever_reason


def test_paths_that_match_no_file_are_named(repo):
    assert unmatched_paths(parse_config({"paths": ["pkg/", "src/"]}, root=repo)) == ["src/"]
    assert unmatched_paths(parse_config({"paths": ["."]}, root=repo)) == []


@pytest.mark.slow
def test_check_end_to_end_declines_and_an_untried_setting_is_not_advised(repo):
    """Real Dynamo: GM101 declines the early return; capture_scalar_outputs is run on the target and
    leaves as many breaks (the str() of the captured number breaks instead), so it is not advised."""
    (repo / "graphmend.yml").write_text(textwrap.dedent('''\
        paths: [pkg/]
        targets:
          - {name: early, entry: "pkg.m:early_target", device: cpu, backend: eager}
          - {name: scalar, entry: "pkg.m:scalar_target", device: cpu, backend: eager}
    '''))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "graphmend", "check", "--no-static", "--format", "json"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    targets = {t["name"]: t for t in json.loads(proc.stdout)["targets"]}
    (early,) = targets["early"]["breaks"]
    assert (early["line"], early["fixable"], early["rule"], early["lever"]) == (5, False, "GM101", "none")
    assert "GM101 declined" in early["lever_reason"]
    item = next(b for b in targets["scalar"]["breaks"] if b["line"] == 19)
    assert not item["fixable"] and item["lever"] == "none"
    assert "capture_scalar_outputs tried: no fewer breaks (1 -> 1)" in item["lever_reason"], item["lever_reason"]
    # without the second run nothing is advised, and the text says the setting is untried
    text = subprocess.run([sys.executable, "-m", "graphmend", "check", "--no-static", "--no-lever-runs", "--target", "scalar"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600).stdout
    assert "[config:" not in text and "[not fixable: " in text and "capture_scalar_outputs might remove it, untried" in text, text


ROUTER = textwrap.dedent('''\
    import torch


    def route(x, t, gates):
        tau = t.item()
        y = x * tau
        for g in gates:
            y = y + pick(y, g)
        return y


    def pick(y, g):
        y = torch.tanh(y)  # made here: the select never hands back the caller's tensor
        if y.sum() > 0:
            y = y * 2
        idx = torch.nonzero(y > g)
        return y[idx].sum()
''')


def _router_breaks(repo: Path, cause_line: int, cause_category: Category, skipped: str = "torch_dynamo_resume_in_route_at_5"):
    """The breaks real Dynamo reports on ``route``: the `.item()`, and the frame it skips from there on
    because of a break inside the loop (in ``pick``, at ``cause_line``), as the worker hands them over."""
    from graphmend.detect.dynamic import result_from_data

    path = str(repo / "pkg" / "r.py")
    gb = {Category.DYNAMIC_SHAPE: "Dynamic shape operator", Category.DATA_DEPENDENT_BRANCH: "Data-dependent branching"}
    item = {"kind": "break", "gb_type": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
            "message": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
            "stack": [[path, 5, "route", 10]], "skipped_frame": None, "hits": 1}
    skip = {"kind": "skip", "gb_type": "graph break in loop", "cause_gb_type": gb[cause_category],
            "message": f"{gb[cause_category]}\n  Explanation: inside a loop",
            "stack": [[path, 8, "route", 16], [path, cause_line, "pick", 8]],
            "skipped_frame": [skipped, path, 5 if "resume" in skipped else 4], "hits": 1}
    config = parse_config({"paths": ["pkg/"]}, root=repo)
    return config, result_from_data("t", {"sites": [item, skip]}, config, repo).breaks


def test_a_break_in_a_frame_dynamo_skips_from_there_on_anyway_is_declined(repo):
    """The tiny-moe case: with the `.item()` gone, Dynamo would reach the loop's break sooner and skip
    the whole function instead of its rest (more graphs, nothing gained): the rule declines and says
    which break to fix first, so check never promises what fix would take back."""
    (repo / "pkg" / "r.py").write_text(ROUTER)
    config, breaks = _router_breaks(repo, 16, Category.DYNAMIC_SHAPE)
    assert [b.category for b in breaks] == [Category.SCALAR, Category.SKIPPED_FRAME]
    item = label_breaks(config, breaks, verified=True)[0]
    assert (item.line, item.fixable, item.lever) == (5, False, Lever.NONE), item
    assert "GM401" in item.lever_reason and "Dynamo runs route() eagerly from here on anyway" in item.lever_reason
    assert "pkg/r.py:16" in item.lever_reason and "fix that break first" in item.lever_reason


def test_a_skip_whose_own_break_is_fixed_too_makes_nothing_moot(repo):
    """When a rule fixes the break that made Dynamo skip the frame (here GM101's branch in `pick`),
    the frame is compiled after the round and the `.item()` rewrite does gain a graph: fixable."""
    (repo / "pkg" / "r.py").write_text(ROUTER)
    config, breaks = _router_breaks(repo, 14, Category.DATA_DEPENDENT_BRANCH)
    branch = next(b for b in label_breaks(config, breaks, verified=True) if b.category is Category.SKIPPED_FRAME)
    assert branch.fixable and branch.rule == "GM101", branch
    item = label_breaks(config, breaks, verified=True)[0]
    assert (item.fixable, item.rule) == (True, "GM401"), item.lever_reason
    # a skip of another function leaves this break fixable too
    (repo / "pkg" / "r.py").write_text(ROUTER)
    config, breaks = _router_breaks(repo, 16, Category.DYNAMIC_SHAPE, skipped="pick")
    assert label_breaks(config, breaks, verified=True)[0].fixable


def test_a_break_in_a_function_dynamo_skips_whole_is_declined_too(repo):
    (repo / "pkg" / "r.py").write_text(ROUTER)
    config, breaks = _router_breaks(repo, 16, Category.DYNAMIC_SHAPE, skipped="route")
    item = label_breaks(config, breaks, verified=True)[0]
    assert not item.fixable and "Dynamo runs all of route() eagerly anyway" in item.lever_reason, item.lever_reason
