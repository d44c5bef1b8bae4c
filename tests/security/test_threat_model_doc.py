"""docs/security.md names a test for each claim: every test it names exists, in the file it names."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_the_threat_model_names_exists():
    doc = (REPO / "docs" / "security.md").read_text()
    sources = {p: p.read_text() for p in (REPO / "tests").rglob("test_*.py")}
    named = set(re.findall(r"\btest_[a-z0-9_]+\b", doc)) - {name[:-3] for name in re.findall(r"\btest_[a-z0-9_]+\.py", doc)}
    assert len(named) >= 15
    for name in sorted(named):
        assert any(re.search(rf"def {name}\(", text) for text in sources.values()), name
    for qualified in re.findall(r"([\w/]*test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)", doc):
        path, name = qualified
        matches = [p for p in sources if p.as_posix().endswith(path)]
        assert matches and any(f"def {name}(" in sources[p] for p in matches), qualified
    assert "README" in doc and "security.md" in (REPO / "README.md").read_text()
