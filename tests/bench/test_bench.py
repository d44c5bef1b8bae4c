"""``graphmend bench`` on a tiny target: fresh processes per arm, ratios before/after."""

from __future__ import annotations

import json

from graphmend.cli import main
from graphmend.schemas import validate
from tests.verify.repo_files import BRANCH, MODEL, WHERE, files


def test_bench_cli_prints_before_after_ratios_and_writes_markdown_and_chart(make_repo, tmp_path, capsys):
    repo_files = files()
    repo_files["graphmend.yml"] = repo_files["graphmend.yml"].replace("    inputs:", "    batch_arg: batch\n    inputs:")
    repo_files["graphmend.yml"] += "bench:\n  warmup: 1\n  repeat: 3\n  batch_sizes: [3]\n"
    root = make_repo(repo_files)
    (root / "pkg/model.py").write_text(MODEL.replace(BRANCH, WHERE))
    md, png = tmp_path / "bench.md", tmp_path / "bench.png"
    code = main(["bench", "-C", str(root), "--format", "json", "--rounds", "1", "--threads", "1",
                 "--markdown", str(md), "--chart", str(png)])
    out = capsys.readouterr()
    assert code == 0, out.err
    data = json.loads(out.out)
    validate("bench", data)
    assert (data["base"], data["warmup"], data["repeat"], data["rounds"], data["threads"]) == ("HEAD", 1, 3, 1, 1)
    (target,) = data["targets"]
    assert target["error"] is None
    assert target["environment"]["backend"] == "eager" and target["environment"]["device"] == "cpu"
    (point,) = target["points"]
    assert point["batch_size"] == 3  # set through the factory's batch_arg
    for arm in ("before", "after"):
        timing = point[arm]
        assert timing["cold_start_s"] > 0 and timing["steady_s"] > 0 and timing["throughput"] > 0
        assert timing["cold_start_s"] >= timing["steady_min_s"]  # the first call compiles
        assert timing["eager_steady_s"] > 0 and timing["runs"] == 1
        assert abs(timing["throughput"] - 3 / timing["steady_s"]) < 1e-6 * timing["throughput"]
    # The where rewrite removes the branch's break: fewer graphs after.
    assert point["after"]["graph_count"] < point["before"]["graph_count"]
    assert point["cold_start_ratio"] == point["before"]["cold_start_s"] / point["after"]["cold_start_s"]
    assert point["steady_ratio"] == point["before"]["steady_s"] / point["after"]["steady_s"]
    assert "cold start" in out.err or "bench" in out.err  # progress on stderr
    table = md.read_text()
    assert "| `toy` | 3 |" in table and "×" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_base_is_a_usage_error_for_bench_and_verify(make_repo, capsys):
    root = make_repo(files())
    for verb in ("bench", "verify"):
        assert main([verb, "-C", str(root), "--base", "nope"]) == 2
        err = capsys.readouterr().err
        assert f"graphmend {verb}: error: --base 'nope': unknown revision" in err
