"""The base-results cache (``--cache-dir``): what a restored folder may hold is untrusted. A
hit is used; an edited, foreign, oversized or linked entry is ignored with a message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphmend import cache
from graphmend.config import Config
from graphmend.model import Category, CheckReport, GraphBreak, TargetResult

SHA = "a" * 40


def _report() -> CheckReport:
    brk = GraphBreak(file="src/a.py", line=11, reason="branch on a tensor", category=Category.DATA_DEPENDENT_BRANCH,
                     fingerprint="0123456789abcdef0123", verified=True)
    return CheckReport(targets=(TargetResult(name="ta", break_count=1, breaks=(brk,), duration_s=3.5,
                                             depends_on=("src/a.py",)),
                                TargetResult(name="tb", error="it crashed")))


@pytest.fixture
def stored(tmp_path) -> tuple[Path, str]:
    key = cache.cache_key(SHA, Config(root=Path(".")))
    cache.store(tmp_path, key, _report(), targets=["ta", "tb"], static=False)
    return tmp_path, key


def test_an_entry_comes_back_as_stored_without_failed_targets(stored):
    folder, key = stored
    entry = cache.load(folder, key)
    assert entry.targets == {"ta"} and not entry.static  # tb crashed: it runs again next time
    assert entry.target("ta") == _report().targets[0]
    assert entry.target("tb") is None


def test_entries_merge_what_shards_stored(stored):
    folder, key = stored
    cache.store(folder, key, CheckReport(targets=(TargetResult(name="tc", duration_s=1.0, depends_on=()),)),
                targets=["tc"], static=False)
    assert cache.load(folder, key).targets == {"ta", "tc"}


def _edit(folder: Path, key: str, change) -> None:
    path = folder / f"{key}.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("change, message", [
    (lambda d: d["report"]["targets"][0]["breaks"].clear(), "do not match their digest"),
    (lambda d: d.update(key="b" * 40 + "-" + "0" * 16), "another key"),
    (lambda d: d.update(torch="0.1"), "another GraphMend or torch version"),
    (lambda d: d.update(format="something-else"), "base-cache.schema.json"),
    (lambda d: d["report"]["targets"][0].update(depends_on="src/a.py"), "base-cache.schema.json"),
])
def test_an_edited_or_foreign_entry_is_refused_with_a_message(stored, change, message):
    folder, key = stored
    _edit(folder, key, change)
    said: list[str] = []
    assert cache.load(folder, key, said.append) is None
    [line] = said
    assert line.startswith("cache: ignoring the entry") and message in line


def test_a_digest_recomputed_by_hand_does_not_launder_a_bad_path(stored):
    folder, key = stored

    def plant(d):
        d["report"]["targets"][0]["depends_on"] = ["../../etc/passwd"]
        d["digest"] = cache._digest(d["report"])

    _edit(folder, key, plant)
    entry = cache.load(folder, key)
    assert entry.target("ta").depends_on is None  # it vouches for nothing: the target runs


def test_garbage_a_symlink_and_an_oversized_entry_are_refused(stored, tmp_path, monkeypatch):
    folder, key = stored
    said: list[str] = []
    path = folder / f"{key}.json"
    real = path.read_text()
    path.write_text("{not json")
    assert cache.load(folder, key, said.append) is None and "ignoring" in said[-1]
    path.unlink()
    (tmp_path / "elsewhere.json").write_text(real)
    os.symlink(tmp_path / "elsewhere.json", path)
    assert cache.load(folder, key, said.append) is None and "not a regular file" in said[-1]
    path.unlink()
    path.write_text(real)
    monkeypatch.setattr(cache, "ENTRY_MAX_BYTES", 100)
    assert cache.load(folder, key, said.append) is None and "over the 100 byte limit" in said[-1]


def test_storing_replaces_a_planted_link_instead_of_writing_through_it(stored, tmp_path):
    folder, key = stored
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = folder / f"{key}.json"
    path.unlink()
    os.symlink(victim, path)
    cache.store(folder, key, _report(), targets=["ta"], static=False)
    assert victim.read_text() == "keep me" and not path.is_symlink()
    assert cache.load(folder, key).targets == {"ta"}


def test_the_key_changes_with_the_configuration():
    one = cache.cache_key(SHA, Config(root=Path(".")))
    two = cache.cache_key(SHA, Config(root=Path("."), paths=("src/",)))
    assert one != two and one.startswith(SHA)


def test_the_key_names_the_python_version_and_the_machine(monkeypatch):
    """A CPU runner's base results are not a GPU runner's (device: auto), nor another Python's."""
    one = cache.cache_key(SHA, Config(root=Path(".")))
    monkeypatch.setattr(cache.platform, "python_version", lambda: "3.99.0")
    assert cache.cache_key(SHA, Config(root=Path("."))) != one
    monkeypatch.undo()
    real = cache.os.path.exists
    monkeypatch.setattr(cache.os.path, "exists", lambda p: (not real(p)) if p == "/dev/nvidiactl" else real(p))
    assert cache.cache_key(SHA, Config(root=Path("."))) != one
