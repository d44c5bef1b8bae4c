"""The worker channel: what a worker leaves in its scratch folder, and the paths it names, are
never followed, waited on or read unbounded (graphmend/runner/channel.py)."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from graphmend.config import load_config
from graphmend.detect.dynamic import result_from_data
from graphmend.runner import Job
from graphmend.runner.channel import CappedStream, ChannelError, clean_text, copy_file, read_file, read_response, source_file
from graphmend.runner.subprocess import read_response as job_response


def test_a_symlinked_response_is_refused_not_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text('{"ok": true, "data": {"token": "s3cret"}}')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "response.json").symlink_to(secret)
    with pytest.raises(ChannelError, match="not a regular file"):
        read_response(scratch)
    result = job_response(scratch, Job(task="x", payload={}, root=tmp_path), 0, "", time.monotonic())
    assert not result.ok and "s3cret" not in repr(result)


def test_a_fifo_or_socket_response_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "response.json")
    done = []
    reader = threading.Thread(target=lambda: done.append(pytest.raises(ChannelError, read_response, tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert done, "reading a FIFO hung"
    os.unlink(tmp_path / "response.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "response.json"))
    with pytest.raises(ChannelError, match="not a regular file"):
        read_response(tmp_path)
    sock.close()


def test_an_oversized_or_malformed_response_is_refused(tmp_path):
    (tmp_path / "response.json").write_bytes(b" " * 2000)
    with pytest.raises(ChannelError, match="over the 1000 byte limit"):
        read_response(tmp_path, max_bytes=1000)
    for text, where in (('{"ok": "yes"}', "ok"), ('{"ok": true}', "data"), ('[1]', "(root)"), ("{nope", "not JSON")):
        (tmp_path / "response.json").write_text(text)
        with pytest.raises(ChannelError, match="protocol|not JSON") as info:
            read_response(tmp_path)
        assert where in str(info.value)


def test_read_file_takes_plain_names_only(tmp_path):
    with pytest.raises(ChannelError, match="plain file name"):
        read_file(tmp_path, "../etc/passwd", 100)


def test_the_state_copy_between_arms_never_follows_a_symlink(tmp_path):
    """verify's "before" arm wrote its state; a worker swapped it for /proc/self/environ."""
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    (before / "state_out.pt").symlink_to("/proc/self/environ")
    with pytest.raises(ChannelError, match="not a regular file"):
        copy_file(before, "state_out.pt", after, "state_in.pt")
    assert not (after / "state_in.pt").exists()
    # A regular file is copied; a symlink planted at the destination is replaced, not written through.
    (before / "state_out.pt").unlink()
    (before / "state_out.pt").write_bytes(b"weights")
    outside = tmp_path / "outside.txt"
    outside.write_text("canary")
    (after / "state_in.pt").symlink_to(outside)
    assert copy_file(before, "state_out.pt", after, "state_in.pt")
    assert (after / "state_in.pt").read_bytes() == b"weights" and not (after / "state_in.pt").is_symlink()
    assert outside.read_text() == "canary"
    assert copy_file(before, "missing.pt", after, "x.pt") is False
    with pytest.raises(ChannelError, match="limit"):
        copy_file(before, "state_out.pt", after, "small.pt", max_bytes=3)


def test_a_capped_stream_keeps_head_and_tail_and_counts_the_rest():
    stream = CappedStream(keep=10)
    for _ in range(1000):
        stream.feed(b"0123456789")
    assert stream.total == 10000 and len(stream.head) == 10 and len(stream.tail) == 10
    assert stream.text() == "0123456789\n[... 9980 bytes of output cut ...]\n0123456789"
    assert stream.tail_text(5).startswith("[... 9995 bytes before this cut ...]")


def test_worker_text_cannot_issue_workflow_commands():
    text = clean_text("fine\n::add-mask::x\n  ::set-output name=a::b\x1b[31mred\x00")
    assert all(not line.startswith("::") for line in text.splitlines())
    assert "\x1b" not in text and "\x00" not in text


def test_frame_paths_are_read_only_inside_the_repository_or_site_packages(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "m.py").write_text("x = 1\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=s3cret\n")
    (repo / "src" / "link.py").symlink_to(secret)
    assert source_file("src/m.py", repo) == str((repo / "src" / "m.py").resolve())
    assert source_file(str(repo / "src" / "m.py"), repo) == str((repo / "src" / "m.py").resolve())
    assert source_file(pytest.__file__, repo) is not None  # a library in site-packages
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic czNjcmV0\n')
    for claim in ("/dev/zero", str(secret), "../secret.txt", "src/link.py", "/proc/self/environ", "<string>", "src",
                  ".git/config", str(repo / ".git" / "config"), "src/../.git/config"):
        assert source_file(claim, repo) is None, claim


def test_a_worker_naming_dev_zero_or_a_secret_gets_nothing_read(tmp_path):
    """The parent's reading of a detect result whose frames name /dev/zero and a secret file:
    no MemoryError, no secret in source_line, every other site still reported."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "m.py").write_text("def f(x):\n    if x.sum() > 0:\n        return x\n")
    (repo / "graphmend.yml").write_text("paths: [src/]\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=s3cret\n")

    def site(file, line):
        return {"kind": "break", "gb_type": "Data-dependent branching", "message": "Data-dependent branching",
                "stack": [[file, line, "f", 4]], "hits": 1}

    data = {"sites": [site("/dev/zero", 1), site(str(secret), 1), site("../secret.txt", 1),
                      site(str(repo / "src" / "m.py"), 2)], "graph_count": 2}
    config = load_config(repo)
    result = result_from_data("t", data, config, repo)
    by_file = {b.file: b for b in result.breaks}
    assert by_file["src/m.py"].source_line == "if x.sum() > 0:"
    assert by_file["/dev/zero"].source_line == "" and by_file[str(secret)].source_line == ""
    assert "../secret.txt" in by_file and not by_file["../secret.txt"].stack[0].inside_repo
    assert "s3cret" not in repr(result)


def _runner_reads_a_command(line: str) -> bool:
    """How the GitHub runner reads a log line (actions/runner ActionCommand): ``TryParseV2`` trims
    leading whitespace and looks for ``::``; the older ``TryParse`` finds ``##[`` anywhere."""
    return line.lstrip().startswith("::") or "##[" in line


def test_indenting_a_workflow_command_does_not_disarm_it():
    """The runner trims leading whitespace before it looks for ``::``, so an indented command (or
    one behind a no-break or ideographic space) is still a command; ``##[`` works mid-line."""
    attacks = ["::add-mask::x", "  ::set-output name=a::b", "\u00a0::stop-commands::t", "\u3000\t::error::e",
               "progress ##[set-output name=a;]b", "##[add-mask]y"]
    for attack in attacks:
        for line in clean_text(f"ok\n{attack}\nok").replace("\r", "\n").split("\n"):
            assert not _runner_reads_a_command(line), (attack, line)
        command = attack.split("::")[1] if "::" in attack else attack.split("##[")[1].split("]")[0]
        assert command.split()[0] in clean_text(attack)  # still readable, only disarmed


def test_a_deeply_nested_or_non_standard_response_is_that_jobs_error(tmp_path):
    """JSON nested deeper than the parser's recursion (a RecursionError, not a ValueError, used to
    escape the runner and lose every other target's result), and NaN/Infinity, which are not JSON
    and would make the parent write an invalid review.json."""
    for text in ('{"ok": true, "data": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}",
                 '{"ok": true, "data": {"x": ' + "[" * 200 + "]" * 200 + "}}",  # parses, but deeper than any result
                 '{"ok": true, "data": {"x": NaN}}', '{"ok": true, "data": {"t": -Infinity}}'):
        (tmp_path / "response.json").write_text(text)
        with pytest.raises(ChannelError, match="not JSON"):
            read_response(tmp_path)
        result = job_response(tmp_path, Job(task="x", payload={}, root=tmp_path), 0, "", time.monotonic())
        assert not result.ok and "not JSON" in result.error


def test_tensor_files_are_opened_through_the_channel(tmp_path):
    """What verify's parent needs to load a worker's tensors: a symlink (to a host file of weights
    or /proc/self/environ) or a FIFO in its place is refused, a real file loads."""
    import torch

    from graphmend.runner.channel import open_file

    host = tmp_path / "host-weights.pt"
    torch.save({"secret": torch.ones(2)}, host)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "outputs.pt").symlink_to(host)
    with pytest.raises(ChannelError, match="not a regular file"):
        open_file(scratch, "outputs.pt")
    (scratch / "outputs.pt").unlink()
    os.mkfifo(scratch / "outputs.pt")
    with pytest.raises(ChannelError, match="not a regular file"):
        open_file(scratch, "outputs.pt")
    (scratch / "outputs.pt").unlink()
    with pytest.raises(ChannelError, match="is missing"):
        open_file(scratch, "outputs.pt")
    torch.save({"y": torch.zeros(3)}, scratch / "outputs.pt")
    with pytest.raises(ChannelError, match="limit"):
        open_file(scratch, "outputs.pt", max_bytes=10)
    with open_file(scratch, "outputs.pt") as f:
        assert torch.equal(torch.load(f, weights_only=True, map_location="cpu")["y"], torch.zeros(3))


def test_remove_tree_never_follows_a_symlink(tmp_path):
    from graphmend.runner.channel import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("canary")
    scratch = tmp_path / "scratch"
    (scratch / "a" / "b").mkdir(parents=True)
    (scratch / "a" / "b" / "f.txt").write_text("x")
    (scratch / "a" / "link").symlink_to(outside)
    (scratch / "a" / "b" / "file-link").symlink_to(outside / "keep.txt")
    assert remove_tree(scratch) and not scratch.exists()
    assert (outside / "keep.txt").read_text() == "canary"
    (tmp_path / "top-link").symlink_to(outside)
    assert remove_tree(tmp_path / "top-link") and (outside / "keep.txt").exists()
    assert remove_tree(tmp_path / "missing")


def test_a_work_folder_with_a_worker_s_deep_folder_is_removed(tmp_path, monkeypatch):
    """What verify and bench hold their workers' scratch folders in (instead of TemporaryDirectory)."""
    from graphmend.runner.channel import work_folder

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with work_folder("graphmend-verify-") as work:
        deep = work / "001-before"
        deep.mkdir()
        fd = os.open(deep, os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_a_response_of_millions_of_tiny_values_is_refused_before_parsing(tmp_path):
    """Under the byte cap, 2.5 million empty objects (7.5 MB) would take the parent ~400 MB to parse
    (20 million in 60 MB: 3 GB and a minute); it is refused at once instead."""
    (tmp_path / "response.json").write_text('{"ok": true, "data": {"x": [' + ",".join(["{}"] * 2_500_000) + "]}}")
    started = time.monotonic()
    with pytest.raises(ChannelError, match="too many values"):
        read_response(tmp_path)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("data", [{"sites": "x"}, {"sites": [None]}, {"sites": [{"stack": 5}]},
                                  {"sites": [{"kind": "break", "stack": [["a", "x", "f", 1]]}]}, {"graph_count": "z"}])
def test_a_detect_result_of_the_wrong_shape_is_that_target_s_error(tmp_path, data):
    """The response schema checks the envelope only; the detect data a hostile target hands back
    (wrong types, missing keys) is that target's error, and the next target still runs."""
    from graphmend.detect.dynamic import detect_targets
    from graphmend.runner import JobResult

    (tmp_path / "graphmend.yml").write_text(
        "paths: [src/]\ntargets:\n  - {name: bad, entry: m:f}\n  - {name: good, entry: m:g}\n")

    class Answers:
        name = "fake"

        def run(self, job):
            if job.label == "target bad":
                return JobResult(ok=True, data=data)
            return JobResult(ok=True, data={"sites": [], "graph_count": 1})

    bad, good = detect_targets(load_config(tmp_path), runner=Answers())
    assert bad.error and "malformed" in bad.error and good.error is None and good.graph_count == 1
