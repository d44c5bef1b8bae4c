"""Finding the rules: every concrete ``Transform`` subclass in ``graphmend/transforms/*.py``.

Adding a rule touches one file: drop ``graphmend/transforms/<pattern>.py`` defining a
subclass of :class:`~graphmend.transforms.base.Transform` with a ``code``. Modules whose
name starts with ``_`` (private helpers) and the framework modules (``base``, ``registry``,
``engine``) are not scanned. A rule module must not import torch at module level: ``rules``
and ``explain`` load the registry and must stay light.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from typing import Optional

from graphmend.transforms.base import DOC_SECTIONS, Transform

FRAMEWORK_MODULES = frozenset({"base", "registry", "engine"})
CODE_RE = re.compile(r"^GM\d{3}$")


class RegistryError(Exception):
    """A rule is malformed (missing attribute, duplicate code); a bug in the rule file."""


def _rule_modules() -> list[str]:
    import graphmend.transforms as package

    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg or info.name.startswith("_") or info.name in FRAMEWORK_MODULES:
            continue
        names.append(f"{package.__name__}.{info.name}")
    return sorted(names)


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def check_rule(cls: type[Transform]) -> None:
    """Raise RegistryError when a rule class lacks what the contract requires."""
    where = f"{cls.__module__}.{cls.__name__}"
    if not CODE_RE.match(cls.code):
        raise RegistryError(f"{where}: code {cls.code!r} is not GM + 3 digits")
    if not cls.name or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", cls.name):
        raise RegistryError(f"{where}: name {cls.name!r} must be kebab-case")
    if not cls.summary:
        raise RegistryError(f"{where}: summary is empty")
    missing = [s for s in DOC_SECTIONS if not cls.docs.get(s, "").strip()]
    if missing:
        raise RegistryError(f"{where}: docs lack section(s): {', '.join(missing)}")
    if not cls.categories:
        raise RegistryError(f"{where}: categories is empty")


@lru_cache(maxsize=1)
def all_rules() -> tuple[Transform, ...]:
    """One instance of every registered rule, sorted by code."""
    for name in _rule_modules():
        importlib.import_module(name)
    rules: dict[str, type[Transform]] = {}
    for cls in _subclasses(Transform):
        if not cls.code or not cls.__module__.startswith("graphmend.transforms."):
            continue  # abstract intermediate bases, or classes defined in tests
        check_rule(cls)
        if cls.code in rules and rules[cls.code] is not cls:
            raise RegistryError(f"duplicate rule code {cls.code}: {rules[cls.code].__module__} and {cls.__module__}")
        rules[cls.code] = cls
    return tuple(rules[c]() for c in sorted(rules))


def get_rule(code: str) -> Optional[Transform]:
    """The rule with this exact code (case-insensitive), or None."""
    code = code.upper()
    return next((r for r in all_rules() if r.code == code), None)


def selected_rules(select: tuple[str, ...] = ("GM",), ignore: tuple[str, ...] = ()) -> tuple[Transform, ...]:
    """The rules ``fix.select`` / ``fix.ignore`` allow (ruff's prefix semantics)."""
    from graphmend.transforms.base import RuleContext

    ctx = RuleContext(select=select, ignore=ignore)
    return tuple(r for r in all_rules() if ctx.selects(r.code))
