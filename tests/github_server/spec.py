"""GitHub's published OpenAPI description (a subset), widened where the server must answer
what GitHub answers but the description does not list, and request/response validation.

The description is ``api.github.com.subset.json`` next to this file, a copy of the project's
shared subset (or the file named by ``GRAPHMEND_GITHUB_OPENAPI``; tests/github_server/README.md
says where it comes from).
It is widened *in memory*, on a copy, in two ways only:

- operations that GitHub answers with 403 (a read-only token, a secondary rate limit),
  422 (a refused comment) or 502 (a flaky proxy) but whose description omits those codes
  get GitHub's own shared error responses for them;
- the server URL is a fixed fake host, because the server listens on a random local port.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any, Optional

from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from werkzeug.datastructures import Headers, ImmutableMultiDict

SPEC_PATH = Path(os.environ.get("GRAPHMEND_GITHUB_OPENAPI") or Path(__file__).with_name("api.github.com.subset.json"))
FAKE_HOST = "http://github.test"

_ADDED = {
    "403": {"$ref": "#/components/responses/forbidden"},
    "404": {"$ref": "#/components/responses/not_found"},
    "422": {"$ref": "#/components/responses/validation_failed_simple"},
    "502": {"$ref": "#/components/responses/internal_error"},
}


def widened(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec["servers"] = [{"url": FAKE_HOST}]
    for item in spec["paths"].values():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            for code, resp in _ADDED.items():
                op["responses"].setdefault(code, resp)
    return spec


_CACHE: dict[str, Any] = {}


def raw_spec() -> dict[str, Any]:
    if "raw" not in _CACHE:
        _CACHE["raw"] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    return _CACHE["raw"]


def openapi() -> OpenAPI:
    if "api" not in _CACHE:
        _CACHE["api"] = OpenAPI.from_dict(widened(raw_spec()))
    return _CACHE["api"]


def example(name: str) -> Any:
    """A deep copy of one of GitHub's own examples (``components/examples``)."""
    return copy.deepcopy(raw_spec()["components"]["examples"][name]["value"])


class SpecRequest:
    """openapi-core's request protocol over what the HTTP handler received."""

    def __init__(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: Optional[bytes]):
        self.method = method.lower()
        self.host_url = FAKE_HOST
        self.path = path
        self.body = body or None
        self.content_type = headers.get("Content-Type", headers.get("content-type", "application/json")).split(";")[0] if body else "application/json"
        self.parameters = RequestParameters(query=ImmutableMultiDict(query), header=Headers(headers))


class SpecResponse:
    def __init__(self, status: int, data: Optional[bytes], headers: dict[str, str]):
        self.status_code = status
        self.data = data
        self.headers = headers
        self.content_type = "application/json" if data else ""


def request_errors(req: SpecRequest) -> Optional[str]:
    try:
        openapi().validate_request(req)
    except Exception as exc:  # openapi-core raises a family of errors; the text names the cause
        return _describe(exc)
    return None


def response_errors(req: SpecRequest, resp: SpecResponse) -> Optional[str]:
    try:
        openapi().validate_response(req, resp)
    except Exception as exc:
        return _describe(exc)
    return None


def _describe(exc: BaseException) -> str:
    """The innermost schema errors (path and message), not the whole offending value."""
    found: list[str] = []
    seen = 0
    node: Optional[BaseException] = exc
    while node is not None and seen < 6:
        for err in getattr(node, "schema_errors", None) or ():
            for leaf in _leaves(err):
                where = "/".join(str(p) for p in leaf.absolute_path)
                found.append(f"{where}: {leaf.message[:200]}")
        node = node.__cause__ or node.__context__
        seen += 1
    head = f"{type(exc).__name__}: {str(exc)[:200]}"
    return (head + " | " + "; ".join(found[:5]))[:2000]


def _leaves(err: Any) -> list[Any]:
    context = list(getattr(err, "context", None) or ())
    if not context:
        return [err]
    out = []
    for sub in context:
        out.extend(_leaves(sub))
    return out
