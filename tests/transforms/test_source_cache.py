"""SourceFile shares one parse per text: the engine parses each rewrite to check it and parses it
again in the next round, so the second is the first's parse; the results stay the same."""

from __future__ import annotations

import libcst as cst
import pytest

from graphmend.transforms import base
from graphmend.transforms.base import SourceError, SourceFile

TEXT = "import torch\n\n\ndef f(x):\n    y = x + 1\n    return y\n"


def test_the_same_text_is_parsed_once_and_another_text_again():
    first = SourceFile("a.py", TEXT)
    second = SourceFile("b.py", TEXT)
    assert second.module is first.module and second.positions is first.positions
    assert second.path == "b.py" and second.lines == first.lines
    other = SourceFile("a.py", TEXT + "\n# more\n")
    assert other.module is not first.module
    assert other.module.code == TEXT + "\n# more\n"


def test_scopes_are_resolved_when_asked_and_match_a_fresh_resolution():
    text = TEXT.replace("y = x + 1", "y = x + 2")
    source = SourceFile("a.py", text)
    func = source.module.body[1]
    assert isinstance(func, cst.FunctionDef)
    scope = source.scopes[func.body.body[0].body[0]]
    assert "y" in scope and "x" in scope
    assert source.positions[func].start.line == 4 and source.parent(func.body) is func


def test_a_syntax_error_names_each_file_however_often_it_is_read():
    for path in ("a.py", "b.py"):
        with pytest.raises(SourceError, match=rf"^{path}:1: syntax error"):
            SourceFile(path, "def (:\n")


def test_the_kept_parses_are_bounded_by_count_and_size(monkeypatch):
    monkeypatch.setattr(base, "_PARSED_MAX", 3)
    monkeypatch.setattr(base, "_PARSED_MAX_CHARS", 200)
    texts = [f"x = {i}\n" for i in range(5)]
    for text in texts:
        SourceFile("a.py", text)
    assert list(base._PARSED)[-3:] == texts[-3:] and len(base._PARSED) <= 3
    big = "y = 1\n" * 50  # 300 characters: alone over the size bound, it is kept until the next parse
    SourceFile("a.py", big)
    assert list(base._PARSED) == [big]
