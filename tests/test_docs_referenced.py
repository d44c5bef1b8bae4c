"""Every document the tool or the example config points at is in the repository, with the section
it names."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from graphmend.transforms.registry import all_rules
from tests.conftest import REPO

CITED = re.compile(r"(docs/[\w./-]+\.md)(?:, \*([^*]+)\*)?")


def _sections_cited(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2) or "") for m in CITED.finditer(text)]


@pytest.mark.parametrize("code", [r.code for r in all_rules()])
def test_explain_cites_documents_that_exist(code):
    out = subprocess.run([sys.executable, "-m", "graphmend", "explain", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "DESIGN.md" not in out.stdout  # not in the repository: the design is docs/design.md
    for doc, section in _sections_cited(out.stdout):
        path = REPO / doc
        assert path.is_file(), doc
        assert section.lower() in path.read_text().lower(), (doc, section)


def test_the_example_config_cites_documents_that_exist():
    text = (REPO / "examples" / "graphmend.yml").read_text()
    cited = _sections_cited(text)
    assert cited and "DESIGN.md" not in text
    for doc, section in cited:
        assert (REPO / doc).is_file() and f"**{section}**" in (REPO / doc).read_text(), (doc, section)
