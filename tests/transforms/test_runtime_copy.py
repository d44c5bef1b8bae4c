"""One runtime per package: the stamped copy a GM2xx/GM3xx fix imports, written by `graphmend fix`.

Real packages in temporary folders, the real rules, real Dynamo (eager backend, CPU).
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from graphmend.config import ConfigError, load_config  # noqa: E402
from graphmend.fix import apply_fixes  # noqa: E402
from graphmend.model import Safety, files_needed  # noqa: E402
from graphmend.transforms import _runtime_copy as RC  # noqa: E402
from graphmend.transforms.base import RuleContext  # noqa: E402
from graphmend.transforms.engine import fix_text  # noqa: E402
from graphmend.transforms.registry import all_rules  # noqa: E402
from tests.transforms._side_effect_support import GraphCounter, reset_dynamo  # noqa: E402

MODULE = '''import logging
import warnings

import torch

logger = logging.getLogger(__name__)


class Block(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("block", y.sum())
        logger.warning("sum is %s", y.sum())
        warnings.warn("careful")
        if (y < 0).any():
            raise ValueError("negative input")
        return y + 1
'''


def _package(root: Path, rel: str = "pkg/sub/mod.py", text: str = MODULE) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent
    while folder != root:
        (folder / "__init__.py").touch()
        folder = folder.parent
    path.write_text(text)
    return path


def _fix(root: Path, rel: str, configured=None):
    rules = [r for r in all_rules() if r.code.startswith(("GM2", "GM3"))]
    ctx = RuleContext(file=rel, threshold=Safety.UNSAFE, runtime=RC.locate(root, rel, configured))
    return fix_text(rel, (root / rel).read_text(), ctx, rules, rounds=4)


@pytest.fixture
def imported(tmp_path, monkeypatch):
    """Import modules of ``tmp_path`` as packages; forget them afterwards."""
    def forget():
        for name in [n for n in sys.modules if n.split(".")[0] in ("pkg", "other")]:
            del sys.modules[name]

    forget()  # another test of this worker may have left its own `pkg` imported
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    forget()


def test_a_package_file_imports_one_stamped_copy_and_replays_with_its_own_locations(imported):
    root = imported
    _package(root)
    result = _fix(root, "pkg/sub/mod.py")
    assert [f.rule for f in result.applied] == ["GM201", "GM202", "GM203", "GM301"]
    [copy] = files_needed(result.applied)
    assert all(f.files == (copy,) for f in result.applied)
    assert (copy.path, copy.action) == ("pkg/_graphmend_runtime.py", "create") and RC.is_ours(copy.text)
    added = result.text.splitlines()[len(MODULE.splitlines()):]
    assert added == ["", "", "from .._graphmend_runtime import _graphmend_install  # noqa: E402",
                     "_graphmend_install(globals())"]
    assert RC.write_files(root, [copy]) == ["pkg/_graphmend_runtime.py"]
    (root / "pkg/sub/mod.py").write_text(result.text)

    from pkg.sub import mod

    reset_dynamo()
    counter = GraphCounter()
    model = torch.compile(mod.Block(), backend=counter)
    out, records = io.StringIO(), []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.pathname, record.lineno, record.getMessage()))

    mod.logger.addHandler(Keep())
    with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(torch.ones(2))
        model(torch.ones(2))
    assert counter.graphs == 1
    assert out.getvalue() == "block tensor(4.)\n" * 2
    file = str(root / "pkg/sub/mod.py")
    assert records == [(file, 13, "sum is tensor(4.)")] * 2
    assert [(w.filename, w.lineno, str(w.message)) for w in caught] == [(file, 14, "careful")] * 2
    with pytest.raises(ValueError, match="^negative input$"):
        model(-torch.ones(2))


def test_a_second_file_of_the_package_shares_the_copy_and_a_script_stays_inline(tmp_path):
    _package(tmp_path, "pkg/a.py")
    _package(tmp_path, "pkg/deep/er/b.py")
    (tmp_path / "script.py").write_text(MODULE)
    first = files_needed(_fix(tmp_path, "pkg/a.py").applied)
    second = _fix(tmp_path, "pkg/deep/er/b.py")
    assert files_needed(second.applied) == first
    assert "from ..._graphmend_runtime import _graphmend_install  # noqa: E402" in second.text
    script = _fix(tmp_path, "script.py")
    assert files_needed(script.applied) == ()
    assert script.text.endswith("\n_graphmend_install(globals())\n") and "def _graphmend_defer(" in script.text
    assert "# Dynamo" not in script.text, "the inline form carries no comments"


def test_an_older_copy_is_updated_and_an_edited_one_refused(tmp_path):
    _package(tmp_path)
    current = RC.stamped()
    older = current.replace("# graphmend-runtime: version", "# graphmend-runtime: version").split("\n", 3)
    body = older[3] + "\n# an older runtime\n"
    old_text = "\n".join(older[:2]) + f"\n# graphmend-runtime: version 0.0.9 sha256 {RC.digest(body)}\n" + body
    assert RC.is_ours(old_text)
    (tmp_path / "pkg/_graphmend_runtime.py").write_text(old_text)
    [copy] = files_needed(_fix(tmp_path, "pkg/sub/mod.py").applied)
    assert (copy.action, copy.old_text, copy.text) == ("update", old_text, current)

    (tmp_path / "pkg/_graphmend_runtime.py").write_text(current)
    [copy] = files_needed(_fix(tmp_path, "pkg/sub/mod.py").applied)
    assert copy.action == "unchanged"

    edited = current.replace("def _graphmend_flush", "def _graphmend_flush_renamed")
    (tmp_path / "pkg/_graphmend_runtime.py").write_text(edited)
    result = _fix(tmp_path, "pkg/sub/mod.py")
    assert not result.applied and result.text == MODULE
    assert {d.rule for d in result.declined} == {"GM201", "GM202", "GM203", "GM301"}
    assert all("pkg/_graphmend_runtime.py exists but is not an unedited graphmend runtime" in d.reason for d in result.declined)


def test_write_files_refuses_a_copy_that_changed_since(tmp_path):
    _package(tmp_path)
    [copy] = files_needed(_fix(tmp_path, "pkg/sub/mod.py").applied)
    (tmp_path / "pkg/_graphmend_runtime.py").write_text("# mine\n")
    with pytest.raises(ValueError, match="changed since the fixes were computed"):
        RC.write_files(tmp_path, [copy])
    assert (tmp_path / "pkg/_graphmend_runtime.py").read_text() == "# mine\n"


def test_configured_location_in_the_package_and_in_another_package(tmp_path):
    _package(tmp_path, "pkg/sub/mod.py")
    (tmp_path / "other").mkdir()
    (tmp_path / "other/__init__.py").touch()
    spot = RC.locate(tmp_path, "pkg/sub/mod.py", "pkg/sub/_rt.py")
    assert (spot.path, spot.module) == ("pkg/sub/_rt.py", "._rt")
    spot = RC.locate(tmp_path, "pkg/sub/mod.py", "other/_rt.py")
    assert (spot.module, spot.problem) == ("other._rt", "")
    spot = RC.locate(tmp_path, "pkg/sub/mod.py", "_rt.py")
    assert "is not inside a package" in spot.problem
    result = _fix(tmp_path, "pkg/sub/mod.py", "_rt.py")
    assert not result.applied and all("is not inside a package" in d.reason for d in result.declined)


@pytest.mark.parametrize("value", ["../x.py", "/abs/x.py", "pkg/x.txt", "pkg/my-mod.py", 3])
def test_config_runtime_key_is_validated(tmp_path, value):
    import json

    (tmp_path / "graphmend.yml").write_text("fix:\n  runtime: " + json.dumps(value) + "\n")
    with pytest.raises(ConfigError, match="fix.runtime"):
        load_config(tmp_path)


def test_graphmend_fix_writes_the_copy_once_and_reports_it_as_a_new_file(tmp_path):
    _package(tmp_path, "pkg/a.py")
    _package(tmp_path, "pkg/b.py")
    (tmp_path / "graphmend.yml").write_text("paths: [pkg/]\nfix:\n  safety: unsafe\n")
    report = apply_fixes(load_config(tmp_path))
    [runtime] = [c for c in report.changes if c.new_file]
    assert runtime.file == "pkg/_graphmend_runtime.py" and runtime.written
    assert runtime.diff.startswith("--- /dev/null\n+++ b/pkg/_graphmend_runtime.py\n")
    assert (tmp_path / runtime.file).read_text() == RC.stamped()
    assert sorted(c.file for c in report.changes) == ["pkg/_graphmend_runtime.py", "pkg/a.py", "pkg/b.py"]
    again = apply_fixes(load_config(tmp_path))
    assert not again.changes, "a second run finds the runtime there and nothing to fix"
