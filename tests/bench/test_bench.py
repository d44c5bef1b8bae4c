"""``graphmend bench`` on a tiny target: fresh processes per arm, ratios before/after."""

from __future__ import annotations

import json

import pytest

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
    # One round: the ratio is the plain ratio, and no interval can be had from one process per arm.
    assert point["cold_start_ratio"] == pytest.approx(point["before"]["cold_start_s"] / point["after"]["cold_start_s"])
    assert point["steady_ratio"] == pytest.approx(point["before"]["steady_s"] / point["after"]["steady_s"])
    assert point["eager_ratio"] == pytest.approx(point["before"]["eager_steady_s"] / point["after"]["eager_steady_s"])
    for metric in ("cold_start", "steady", "throughput", "eager"):
        assert point[f"{metric}_ci"] is None and point[f"{metric}_verdict"] == "no-change"
    assert "use --rounds 5 or more" in point["noise"]
    assert data["source_changed"] is True and data["load_average"] is not None
    assert point["before"]["steady_runs"] == [point["before"]["steady_s"]]
    assert "cold start" in out.err or "bench" in out.err  # progress on stderr
    table = md.read_text()
    assert "| `toy` | 3 |" in table and "[no interval] no-change" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_base_is_a_usage_error_for_bench_and_verify(make_repo, capsys):
    root = make_repo(files())
    for verb in ("bench", "verify"):
        assert main([verb, "-C", str(root), "--base", "nope"]) == 2
        err = capsys.readouterr().err
        assert f"graphmend {verb}: error: --base 'nope': unknown revision" in err


def test_identical_trees_say_no_source_change_and_measure_only_when_asked(make_repo, capsys):
    root = make_repo(files())
    assert main(["bench", "-C", str(root)]) == 0
    out = capsys.readouterr()
    assert out.out == ("bench: no source change between HEAD and the working tree: nothing measured "
                       "(--aa measures anyway, as an A/A check of this machine's noise)\n")
    assert main(["bench", "-C", str(root), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    validate("bench", data)
    assert data["source_changed"] is False and data["targets"] == []

    # --aa measures anyway (workers answering known figures here; the real workers run above).
    from graphmend.bench.parent import bench
    from graphmend.config import load_config
    from graphmend.report.markdown_verify import render_bench_text
    from tests.bench.test_parent import Scripted, figures

    same = [figures(0.001 * j) for j in (1.0, 1.02, 0.98, 1.01, 0.99)]
    report = bench(load_config(root), runner=Scripted(same, same[::-1]), rounds=5, threads=1, aa=True)
    assert report.source_changed is False and len(report.targets[0].points) == 1
    text = render_bench_text(report)
    assert "A/A check: no source change between HEAD and the working tree; every verdict should be no-change" in text
    assert "overall: cold start: 0 faster, 0 slower, 1 no-change; steady state: 0 faster, 0 slower, 1 no-change" in text


def test_a_comment_is_a_source_change(make_repo, tmp_path):
    from graphmend.trees import changed_files, tree_at

    root = make_repo(files())
    with tree_at(root, "HEAD") as before:
        assert changed_files(before, root) == []
        (root / "pkg/model.py").write_text((root / "pkg/model.py").read_text() + "# a comment\n")
        assert changed_files(before, root) == ["pkg/model.py"]
        (root / "pkg/model.py").write_text(MODEL)
        (root / "pkg/new.py").write_text("")
        assert changed_files(before, root) == ["pkg/new.py"]  # an untracked, not ignored file is part of the tree
        (root / "pkg/new.py").unlink()
        (root / "pkg/__pycache__").mkdir(exist_ok=True)
        (root / "pkg/__pycache__/model.cpython-311.pyc").write_bytes(b"written by running the tree")
        assert changed_files(before, root) == []


def test_bench_help_names_rounds_min_effect_and_aa(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "5 or more give a 99% interval" in out and "--min-effect PCT" in out and "A/A check" in out


def test_min_effect_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--min-effect", "150"])
    assert exit_.value.code == 2
    assert "must be at least 0 and below 100" in capsys.readouterr().err
