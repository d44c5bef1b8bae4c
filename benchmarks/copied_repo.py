"""A throwaway git repository whose source is installed packages, copied, for the fix loop to edit.

The benchmark tables that measure GraphMend on a library's own code copy its installed package(s)
under ``src/``, add a targets module (``tools/graphmend_targets.py``) that builds each entry point
from that copy, and a ``graphmend.yml`` listing the targets at ``fix.safety: safe``; the whole tree is
committed, so ``verify`` can compare the committed tree with the fixed one. The entry points are
compiled by GraphMend's worker, outside the copied packages.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Iterable, Optional

CONFIG_HEAD = "paths: [src/]\nsandbox:\n  timeout_s: {timeout}\nfix:\n  safety: safe\ntargets:\n"
CONFIG_TARGET = "  - {{name: {name}, entry: \"tools.graphmend_targets:{factory}\", device: cpu, dtype: float32, backend: eager}}\n"
_GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}


def make_repo(root: Path, packages: Iterable[ModuleType], targets_source: str, factories: dict[str, str],
              timeout_s: int = 900, settings: Optional[dict[str, Iterable[str]]] = None) -> Path:
    """Copy ``packages`` to ``root/src``, write the targets module and the config (target name ->
    factory function in the targets module; ``settings``: target name -> the Dynamo capture
    settings its compile site is given, the target's ``dynamo_config``), and commit it all."""
    for package in packages:
        shutil.copytree(Path(package.__file__).parent, root / "src" / package.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tools").mkdir()
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "graphmend_targets.py").write_text(targets_source)
    (root / "graphmend.yml").write_text(
        CONFIG_HEAD.format(timeout=timeout_s)
        + "".join(_target(name, factory, sorted((settings or {}).get(name, ()))) for name, factory in factories.items()))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "before"]):
        subprocess.run(["git", *args], cwd=root, env=_GIT_ENV, check=True, capture_output=True)
    return root


def _target(name: str, factory: str, settings: list[str]) -> str:
    line = CONFIG_TARGET.format(name=name, factory=factory)
    return line.replace("}\n", f", dynamo_config: [{', '.join(settings)}]}}\n") if settings else line
