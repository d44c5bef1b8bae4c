"""Import boundaries: only bot/github_client.py imports PyGithub; bot/ never imports torch or
libcst; graphmend/ never imports github or bot.github_client."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_client_imports_pygithub_and_bot_never_imports_the_engine():
    for path in sorted((REPO / "bot").glob("*.py")):
        mods = {m.split(".")[0] for m in imported(path)}
        assert not mods & {"torch", "libcst"}, path
        if path.name != "github_client.py":
            assert "github" not in mods, path


def test_graphmend_never_imports_github():
    for path in sorted((REPO / "graphmend").rglob("*.py")):
        mods = imported(path)
        assert not any(m == "github" or m.startswith("github.") or m == "bot.github_client" for m in mods), path
