"""The fix model's whole files (Fix.files / FileWrite): JSON round trip and de-duplication."""

from __future__ import annotations

import json

import pytest

from graphmend.model import Edit, FileWrite, Fix, Safety, files_needed, from_dict, to_dict


def _fix(line: int, *files: FileWrite) -> Fix:
    return Fix(rule="GM201", title="t", safety=Safety.SAFE, edits=(Edit("pkg/m.py", line, line, "x\n", "y\n"),),
               file="pkg/m.py", line=line, files=files)


RUNTIME = FileWrite("pkg/_graphmend_runtime.py", "# runtime\n", "create", "", "graphmend runtime 0.1.0")


def test_files_round_trip_through_json():
    fix = _fix(3, RUNTIME)
    assert from_dict(Fix, json.loads(json.dumps(to_dict(fix)))) == fix
    assert to_dict(fix)["files"][0]["action"] == "create"


def test_a_fix_without_files_reads_back_from_older_json():
    data = to_dict(_fix(3))
    del data["files"]
    assert from_dict(Fix, data).files == ()


def test_files_needed_gives_each_path_once():
    other = FileWrite("lib/_graphmend_runtime.py", "# runtime\n", "unchanged", "# runtime\n")
    got = files_needed([_fix(3, RUNTIME), _fix(9, RUNTIME), _fix(12, other), _fix(20)])
    assert got == (other, RUNTIME)


def test_files_needed_refuses_two_contents_for_one_path():
    changed = FileWrite(RUNTIME.path, "# another\n", "create")
    with pytest.raises(ValueError, match="different contents"):
        files_needed([_fix(3, RUNTIME), _fix(9, changed)])


def test_edited_and_written_files():
    fix = Fix(rule="GM201", title="t", safety=Safety.SAFE,
              edits=(Edit("b.py", 1, 1, "x\n"), Edit("a.py", 2, 2, "y\n"), Edit("b.py", 5, 5, "z\n")),
              file="b.py", line=1, files=(RUNTIME, FileWrite("c.py", "", "unchanged")))
    assert fix.edited_files == ("a.py", "b.py")
    assert fix.writes_files == (RUNTIME,)
