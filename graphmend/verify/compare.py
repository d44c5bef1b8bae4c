"""Comparing two arms of ``verify`` in the parent: outputs, gradients, text, records, exceptions.

The tensors come from ``outputs.pt`` files written by workers and are loaded here with
``weights_only=True`` (plain tensors in a dict; nothing the worker pickled can run code in the
parent). Two checks per input case:

- ``eager``: eager after vs eager before, tightly (a few ulps of the dtype; exact for integer
  and boolean tensors): a rewrite must not change what the program computes;
- ``compiled``: compiled after vs eager before, within ``torch.testing.assert_close``'s
  defaults for the dtype (or the target's ``rtol``/``atol``): compilation may reorder floating
  point operations, nothing more. A difference that compiling the *original* tree shows as
  well is the compiler's, not the fix's, and is not held against the fix.

Log records and warnings are compared with their source locations. The two trees differ in
line numbers wherever the fix inserted or removed lines, so a location of the "before" tree is
mapped through the line diff of its file: unchanged lines map to one line, lines inside a
rewritten hunk map to the whole replacement hunk (a deferred call replays at its new line).
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from graphmend.verify.results import Mismatch


@dataclass
class ArmData:
    """What one arm's workers reported (JSON) and the path of its tensors."""

    root: Path
    cases: dict[int, dict[str, Any]]  # index -> {"index", "source", "modes": {mode: outcome}}
    tensors: dict[str, Any] = field(default_factory=dict)  # "index/mode/path" -> tensor


@dataclass
class Stats:
    max_abs: float = 0.0
    max_rel: float = 0.0

    def add(self, abs_err: float, rel_err: float) -> None:
        self.max_abs = max(self.max_abs, abs_err)
        self.max_rel = max(self.max_rel, rel_err)


def load_tensors(path: Path) -> dict[str, Any]:
    import torch

    if not path.is_file():
        return {}
    data = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: expected a dict of tensors")
    return data


# --------------------------------------------------------------------------------------------
# Locations


class LineMap:
    """Maps (file, line) of the before tree to acceptable lines of the after tree."""

    def __init__(self, before_root: Path, after_root: Path):
        self.before_root, self.after_root = Path(before_root), Path(after_root)
        self._maps: dict[str, Optional[list[tuple[str, int, int, int, int]]]] = {}

    def rel(self, path: str, root: Path) -> str:
        if not os.path.isabs(path):
            return path.replace(os.sep, "/")  # made repo-relative by the worker
        try:
            return os.path.relpath(os.path.realpath(path), os.path.realpath(root)).replace(os.sep, "/") if _inside(path, root) else path
        except ValueError:
            return path

    def _opcodes(self, rel: str) -> Optional[list[tuple[str, int, int, int, int]]]:
        if rel not in self._maps:
            try:
                a = (self.before_root / rel).read_text(encoding="utf-8", errors="replace").splitlines()
                b = (self.after_root / rel).read_text(encoding="utf-8", errors="replace").splitlines()
                self._maps[rel] = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            except OSError:
                self._maps[rel] = None
        return self._maps[rel]

    def accepts(self, rel_before: str, line_before: int, rel_after: str, line_after: int) -> bool:
        if rel_before != rel_after:
            return False
        if rel_before.startswith("/") or os.path.isabs(rel_before):
            return line_before == line_after  # outside the trees: the same file on both sides
        ops = self._opcodes(rel_before)
        if ops is None:
            return line_before == line_after
        i = line_before - 1
        for tag, i1, i2, j1, j2 in ops:
            if i1 <= i < i2 or (tag == "insert" and i == i1):
                if tag == "equal":
                    return line_after - 1 == j1 + (i - i1)
                # A rewritten hunk: the call may now sit anywhere inside its replacement.
                return j1 <= line_after - 1 < max(j2, j1 + 1)
        return line_before == line_after


def _inside(path: str, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


# --------------------------------------------------------------------------------------------
# Tensors


def tight_tolerance(dtype: Any) -> tuple[float, float]:
    """A few ulps of the dtype: eager vs eager of two equivalent programs."""
    import torch

    eps = torch.finfo(dtype).eps if dtype.is_floating_point or dtype.is_complex else 0.0
    return 8 * eps, 8 * eps


def compare_tensor(actual: Any, expected: Any, *, tight: bool, rtol: Optional[float], atol: Optional[float], stats: Stats) -> Optional[str]:
    """None when close enough, else a one-line reason."""
    import torch

    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if actual.numel() == 0:
        return None
    if not (actual.is_floating_point() or actual.is_complex()):
        if torch.equal(actual, expected):
            return None
        bad = int((actual != expected).sum())
        return f"{bad} of {actual.numel()} elements differ"
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    both_nan = torch.isnan(a) & torch.isnan(e)
    same = (a == e) | both_nan
    diff = torch.where(same, torch.zeros_like(a), (a - e).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    abs_err = float(diff.max())
    rel_err = float((diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)).max())
    stats.add(abs_err, rel_err)
    if tight:
        t_rtol, t_atol = tight_tolerance(actual.dtype)
        rtol_, atol_ = t_rtol, t_atol
    else:
        rtol_, atol_ = rtol, atol
    try:
        if rtol_ is None or atol_ is None:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        else:
            torch.testing.assert_close(actual, expected, rtol=rtol_, atol=atol_, equal_nan=True)
    except AssertionError:
        return f"max abs error {abs_err:.3g}, max rel error {rel_err:.3g}"
    return None


# --------------------------------------------------------------------------------------------
# One case, one check


def compare_outcomes(
    case: str,
    check: str,
    actual: dict[str, Any],
    expected: dict[str, Any],
    actual_tensors: dict[str, Any],
    expected_tensors: dict[str, Any],
    *,
    actual_root: Path,
    expected_root: Path,
    lines: LineMap,
    rtol: Optional[float],
    atol: Optional[float],
    stats: Stats,
) -> list[Mismatch]:
    """Differences of ``actual`` (the after tree, or a compiled run) from ``expected``.

    ``*_tensors`` map an output path ("out[0]", "grad:fc.weight") to its tensor.
    """
    found: list[Mismatch] = []

    def add(kind: str, detail: str) -> None:
        found.append(Mismatch(kind=kind, check=check, case=case, detail=detail))

    exp_exc, act_exc = expected.get("exception"), actual.get("exception")
    if exp_exc or act_exc:
        if not exp_exc:
            add("exception", f"raises {act_exc['type']}: {act_exc['message']} where the original returns")
        elif not act_exc:
            add("exception", f"returns where the original raises {exp_exc['type']}: {exp_exc['message']}")
        elif exp_exc["type"] != act_exc["type"]:
            add("exception", f"raises {act_exc['type']} instead of {exp_exc['type']} ({act_exc['message']!r} vs {exp_exc['message']!r})")
        elif exp_exc["message"] != act_exc["message"]:
            add("exception", f"{act_exc['type']} message {act_exc['message']!r} instead of {exp_exc['message']!r}")
    else:
        exp_paths, act_paths = list(expected.get("tensors", [])), list(actual.get("tensors", []))
        if exp_paths != act_paths:
            missing = [p for p in exp_paths if p not in act_paths]
            extra = [p for p in act_paths if p not in exp_paths]
            kind = "grad" if any(p.startswith("grad:") for p in missing + extra) else "structure"
            add(kind, f"different outputs: missing {missing or '[]'}, unexpected {extra or '[]'}")
        for path in exp_paths:
            if path not in act_paths:
                continue
            why = compare_tensor(actual_tensors[path], expected_tensors[path], tight=(check == "eager"), rtol=rtol, atol=atol, stats=stats)
            if why:
                add("grad" if path.startswith("grad:") else "output", f"{path}: {why}")
        exp_v, act_v = expected.get("values", {}), actual.get("values", {})
        keys = sorted(k for k in set(exp_v) | set(act_v)
                      if not _same_value(act_v.get(k, "<absent>"), exp_v.get(k, "<absent>"), loose=(check == "compiled"), rtol=rtol, atol=atol))
        if keys:
            add("output", "; ".join(f"{k}: {act_v.get(k, '<absent>')!r} != {exp_v.get(k, '<absent>')!r}" for k in keys[:3]))

    if expected.get("stdout", "") != actual.get("stdout", ""):
        add("stdout", f"printed {_short(actual.get('stdout', ''))} instead of {_short(expected.get('stdout', ''))}")

    exp_logs, act_logs = expected.get("logs", []), actual.get("logs", [])
    problem = _compare_sequence(exp_logs, act_logs, ("message", "level", "funcName"), "pathname", "lineno", expected_root, actual_root, lines)
    if problem:
        add("log", problem)
    exp_w, act_w = expected.get("warnings", []), actual.get("warnings", [])
    problem = _compare_sequence(exp_w, act_w, ("category", "message"), "filename", "lineno", expected_root, actual_root, lines)
    if problem:
        add("warning", problem)
    return found


def _same_value(actual: Any, expected: Any, *, loose: bool, rtol: Optional[float], atol: Optional[float]) -> bool:
    """Plain output values (a Python float from ``.item()``, an int, a string): exact, except
    that a compiled float may differ like a float32 tensor would."""
    if loose and isinstance(actual, float) and isinstance(expected, float) and not isinstance(actual, bool):
        if math.isnan(actual) and math.isnan(expected):
            return True
        r = 1.3e-6 if rtol is None else rtol
        a = 1e-5 if atol is None else atol
        return abs(actual - expected) <= a + r * abs(expected)
    return type(actual) is type(expected) and actual == expected or (actual != actual and expected != expected)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _compare_sequence(expected: list[dict], actual: list[dict], keys: tuple[str, ...], file_key: str, line_key: str,
                      expected_root: Path, actual_root: Path, lines: LineMap) -> Optional[str]:
    """The first difference between two ordered lists of records, or None."""
    if len(expected) != len(actual):
        shown = [r.get("message") for r in actual]
        want = [r.get("message") for r in expected]
        return f"{len(actual)} records {shown!r} instead of {len(expected)} {want!r}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        for key in keys:
            if e.get(key) != a.get(key):
                return f"record {i}: {key} {a.get(key)!r} instead of {e.get(key)!r}"
        rel_e = lines.rel(e.get(file_key, ""), expected_root)
        rel_a = lines.rel(a.get(file_key, ""), actual_root)
        if not lines.accepts(rel_e, int(e.get(line_key) or 0), rel_a, int(a.get(line_key) or 0)):
            return f"record {i} ({e.get('message')!r}): location {rel_a}:{a.get(line_key)} instead of {rel_e}:{e.get(line_key)}"
    return None


def case_tensors(tensors: dict[str, Any], index: int, mode: str) -> dict[str, Any]:
    prefix = f"{index}/{mode}/"
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def compare_arms(before: ArmData, after: ArmData, *, rtol: Optional[float], atol: Optional[float]) -> tuple[list[Mismatch], Stats, Stats]:
    """All mismatches of ``after`` against ``before``, with error statistics per check."""
    lines = LineMap(before.root, after.root)
    eager_stats, compiled_stats, baseline_stats = Stats(), Stats(), Stats()
    found: list[Mismatch] = []
    for index in sorted(before.cases):
        b_case = before.cases[index]
        a_case = after.cases.get(index)
        label = b_case.get("source", str(index))
        if a_case is None:
            found.append(Mismatch("structure", "eager", label, "the case did not run in the after tree"))
            continue
        b_eager = b_case["modes"].get("eager")
        if b_eager is None:
            continue
        b_eager_t = case_tensors(before.tensors, index, "eager")
        common = dict(actual_root=after.root, expected_root=before.root, lines=lines, rtol=rtol, atol=atol)
        if "eager" in a_case["modes"]:
            found += compare_outcomes(label, "eager", a_case["modes"]["eager"], b_eager,
                                      case_tensors(after.tensors, index, "eager"), b_eager_t, stats=eager_stats, **common)
        if "compiled" in a_case["modes"]:
            compiled = compare_outcomes(label, "compiled", a_case["modes"]["compiled"], b_eager,
                                        case_tensors(after.tensors, index, "compiled"), b_eager_t, stats=compiled_stats, **common)
            if compiled and "compiled" in b_case["modes"]:
                # What compiling the original already changes is not the fix's doing.
                same_lines = LineMap(before.root, before.root)
                baseline = compare_outcomes(label, "compiled", b_case["modes"]["compiled"], b_eager,
                                            case_tensors(before.tensors, index, "compiled"), b_eager_t,
                                            actual_root=before.root, expected_root=before.root, lines=same_lines,
                                            rtol=rtol, atol=atol, stats=baseline_stats)
                known = {(m.kind, m.detail) for m in baseline}
                compiled = [m for m in compiled if (m.kind, m.detail) not in known]
            found += compiled
    return found, eager_stats, compiled_stats
