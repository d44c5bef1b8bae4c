"""Versioned JSON Schemas of every verb's JSON output (``<name>.schema.json``, draft 2020-12).

``validate(name, data)`` checks a value against one of them; ``jsonschema`` is imported only
when something is validated.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

__all__ = ["load", "validate", "SchemaValidationError"]


class SchemaValidationError(ValueError):
    """``data`` does not match the schema; ``str()`` names the schema, the place and the cause."""


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The schema ``<name>.schema.json`` as a dict (``name`` like ``"check"``)."""
    path = HERE / f"{name}.schema.json"
    if not path.is_file():
        known = sorted(p.name[: -len(".schema.json")] for p in HERE.glob("*.schema.json"))
        raise KeyError(f"no schema named {name!r} (known: {', '.join(known)})")
    return json.loads(path.read_text(encoding="utf-8"))


def validate(name: str, data: Any) -> None:
    """Raise ``SchemaValidationError`` when ``data`` does not match schema ``name``."""
    import jsonschema

    schema = load(name)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SchemaValidationError(f"{name}.schema.json: at {where}: {first.message}{more}")
