"""review.json reaches ``post``, ``apply`` and the action as an artifact of the job that ran the
pull request's code, so it is read as every byte from a worker is: never through a symlink or a
FIFO, bounded in size, in the number of values it may parse into and in depth, and every
failure is one ``ReviewError`` line.

It used to be read with ``Path.read_text`` and ``json.loads``: a FIFO hung ``post`` for good, a
few MB of ``[],`` parsed into hundreds of MB before the schema refused it, and JSON nested
deeper than the parser's recursion ended ``post`` with a traceback instead of one line."""

from __future__ import annotations

import os
import threading
import tracemalloc

import pytest

from bot.review import ReviewError, load


def _load_within(path, seconds: float):
    """``load(path)``'s exception (or result), or "hung" when it has not returned in ``seconds``."""
    out: list = []

    def run() -> None:
        try:
            out.append(load(path))
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return out[0] if out else "hung"


def test_a_fifo_as_review_json_is_refused_at_once(tmp_path):
    path = tmp_path / "review.json"
    os.mkfifo(path)
    got = _load_within(path, 10)
    if got == "hung":  # unblock the reader still waiting (the old code), so its thread ends
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert isinstance(got, ReviewError) and "not a regular file" in str(got), got


def test_a_symlinked_review_json_is_not_followed(tmp_path):
    elsewhere = tmp_path / "host-file.json"
    elsewhere.write_text("{}")
    (tmp_path / "review.json").symlink_to(elsewhere)
    with pytest.raises(ReviewError, match="not a regular file"):
        load(tmp_path / "review.json")


def test_millions_of_tiny_values_are_refused_before_parsing(tmp_path):
    path = tmp_path / "review.json"
    path.write_text("[" + "[]," * 3_000_000 + "[]]")  # 9 MB
    tracemalloc.start()
    try:
        with pytest.raises(ReviewError, match="too many values"):
            load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, peak


def test_json_nested_past_the_parser_s_recursion_is_one_error_line(tmp_path):
    path = tmp_path / "review.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ReviewError, match="not JSON"):
        load(path)
