"""Comparing two arms of ``verify`` in the parent: outputs, gradients, text, records, exceptions.

The tensors come from ``outputs.pt`` files written by workers and are loaded here with
``weights_only=True`` (plain tensors in a dict; nothing the worker pickled can run code in the
parent). Two checks per input case, like with like on the same seeds, weights and inputs:

- ``eager``: eager after vs eager before, tightly (a few ulps of the dtype; exact for integer
  and boolean tensors): a rewrite must not change what the program computes;
- ``compiled``: compiled after vs compiled before, within ``torch.testing.assert_close``'s
  defaults for the dtype (or the target's ``rtol``/``atol``), or else within them of the eager
  original: compilation may reorder floating point operations, nothing more.

Each check sees everything a call can change: outputs (and gradients), the exception, the
arguments written in place, the module's state (also after an exception), stdout, stderr, log
records and warnings, and the order in which those streams were written. Where the original
itself is not deterministic, or differs between eager and compiled, the rewrite is judged
against that baseline and the report says so in one line (``compare_arms``).

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

from graphmend.sources import line_text, split_lines
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
    """The tensors a worker saved at ``path`` (in its scratch folder), read through the channel:
    never a symlink or special file, size-capped, a ``torch.save`` archive that unpacks to no
    more than its size (``check_stored_archive``), unpickled with ``weights_only``. ``{}`` when the
    worker saved none; ``ValueError`` when the file is not what a worker may leave there."""
    import torch

    from graphmend.runner.channel import ChannelError, check_stored_archive, open_file

    try:
        f = open_file(path.parent, path.name)
    except ChannelError as exc:
        if str(exc).endswith("is missing"):
            return {}
        raise ValueError(str(exc)) from None
    with f:
        try:
            check_stored_archive(f, path.name)  # never more bytes in memory than on disk
        except ChannelError as exc:
            raise ValueError(str(exc)) from None
        try:
            data = torch.load(f, weights_only=True, map_location="cpu")
        except Exception as exc:  # a truncated or forged file is the arm's error, not ours
            raise ValueError(f"{path.name}: not a tensor file: {type(exc).__name__}") from None
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
                a = [line_text(x) for x in split_lines((self.before_root / rel).read_text(encoding="utf-8", errors="replace"))]
                b = [line_text(x) for x in split_lines((self.after_root / rel).read_text(encoding="utf-8", errors="replace"))]
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


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``torch.testing.assert_close``'s (rtol, atol) for the dtype: compiled vs eager."""
    import torch

    table = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
             torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}
    return table.get(dtype, (0.0, 0.0))


def tensor_error(actual: Any, expected: Any) -> tuple[float, float]:
    """(max abs, max rel) difference of two float tensors of one shape; NaN where both are NaN
    counts as equal, NaN against a number as infinitely far."""
    import torch

    a, e = actual.to(torch.float64), expected.to(torch.float64)
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    diff = torch.nan_to_num(torch.where(same, torch.zeros_like(a), (a - e).abs()), nan=float("inf"))
    if diff.numel() == 0:
        return 0.0, 0.0
    return float(diff.max()), float((diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)).max())


def compare_tensor(actual: Any, expected: Any, *, tight: bool, rtol: Optional[float], atol: Optional[float], stats: Stats,
                   widen: float = 0.0) -> Optional[str]:
    """None when close enough, else a one-line reason. ``widen`` is added to the absolute
    tolerance: the spread the original itself shows between two runs (see ``compare_arms``)."""
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
    abs_err, rel_err = tensor_error(actual, expected)
    stats.add(abs_err, rel_err)
    if tight:
        rtol_, atol_ = tight_tolerance(actual.dtype)
    elif rtol is None or atol is None:
        rtol_, atol_ = default_tolerance(actual.dtype)
    else:
        rtol_, atol_ = rtol, atol
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol_, atol=atol_ + widen, equal_nan=True)
    except AssertionError:
        return f"max abs error {abs_err:.3g}, max rel error {rel_err:.3g}" + (f" (beyond the original's own spread {widen / 2:.3g})" if widen else "")
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
    widen: float = 0.0,
    alternative: Optional[dict[str, Any]] = None,
) -> list[Mismatch]:
    """Differences of ``actual`` (the after tree) from ``expected`` (the original, same mode).

    ``*_tensors`` map a path ("out[0]", "grad:fc.weight", "input:args[0]", "state:buf") to its
    tensor. ``widen``: the original's own spread, added to the absolute tolerance of outputs and
    gradients. ``alternative``: other tensors of the original an output may match instead
    (compiled after vs the original eager, where compiling may round either way).
    """
    found: list[Mismatch] = []
    tight = check == "eager"

    def add(kind: str, detail: str) -> None:
        found.append(Mismatch(kind=kind, check=check, case=case, detail=detail))

    def close(path: str, widen_: float) -> Optional[str]:
        why = compare_tensor(actual_tensors[path], expected_tensors[path], tight=tight, rtol=rtol, atol=atol, stats=stats, widen=widen_)
        if why and alternative is not None and path in alternative:
            if compare_tensor(actual_tensors[path], alternative[path], tight=tight, rtol=rtol, atol=atol, stats=Stats(), widen=widen_) is None:
                return None
        return why

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
            why = close(path, widen)
            if why:
                add("grad" if path.startswith("grad:") else "output", f"{path}: {why}")
        exp_v, act_v = expected.get("values", {}), actual.get("values", {})
        keys = sorted(k for k in set(exp_v) | set(act_v)
                      if not _same_value(act_v.get(k, "<absent>"), exp_v.get(k, "<absent>"), loose=not tight, rtol=rtol, atol=atol))
        if keys:
            more = f"; also {', '.join(keys[3:])}" if len(keys) > 3 else ""
            add("output", "; ".join(f"{k}: {act_v.get(k, '<absent>')!r} != {exp_v.get(k, '<absent>')!r}" for k in keys[:3]) + more)

    # What the call wrote besides its outputs, also when it raised.
    for kind, key, what in (("input", "inputs", "argument"), ("state", "state", "module state")):
        problem = _compare_writes(kind, what, expected.get(key, {}), actual.get(key, {}), close, tight, rtol, atol)
        if problem:
            add(kind, problem)

    streams_differ = False
    for stream in ("stdout", "stderr"):
        if expected.get(stream, "") != actual.get(stream, ""):
            streams_differ = True
            add(stream, f"printed {_short(actual.get(stream, ''))} instead of {_short(expected.get(stream, ''))}")

    exp_logs, act_logs = expected.get("logs", []), actual.get("logs", [])
    problem = _compare_sequence(exp_logs, act_logs, ("message", "level", "funcName"), "pathname", "lineno", expected_root, actual_root, lines)
    if problem:
        streams_differ = True
        add("log", problem)
    exp_w, act_w = expected.get("warnings", []), actual.get("warnings", [])
    problem = _compare_sequence(exp_w, act_w, ("category", "message"), "filename", "lineno", expected_root, actual_root, lines)
    if problem:
        streams_differ = True
        add("warning", problem)
    if not streams_differ and "order" in expected and "order" in actual and expected["order"] != actual["order"]:
        # Each stream alone is the same; what a reader of the interleaved output sees is not.
        add("order", f"streams written in the order {', '.join(actual['order'])} instead of {', '.join(expected['order'])}")
    return found


def _compare_writes(kind: str, what: str, expected: dict[str, dict], actual: dict[str, dict], close: Any, tight: bool,
                    rtol: Optional[float], atol: Optional[float]) -> Optional[str]:
    """The first difference between what two calls wrote to their arguments or module state."""
    for name in sorted(set(expected) | set(actual)):
        e, a = expected.get(name), actual.get(name)
        if a is None:
            return f"{what} {name} is written by the original, not by the rewrite"
        if e is None:
            return f"{what} {name} is written by the rewrite, not by the original"
        if e.get("removed") or a.get("removed"):
            if e.get("removed") != a.get("removed"):
                return f"{what} {name} is {'removed' if a.get('removed') else 'kept'} by the rewrite, {'removed' if e.get('removed') else 'kept'} by the original"
            continue
        if e.get("tensor") and a.get("tensor"):
            why = close(f"{kind}:{name}", 0.0)
            if why:
                return f"{what} {name} after the call: {why}"
            if e.get("strides") != a.get("strides"):
                return (f"{what} {name} after the call: strides {a.get('strides') or 'contiguous'} instead of "
                        f"{e.get('strides') or 'contiguous'}")
        elif e.get("tensor") or a.get("tensor"):
            return f"{what} {name} is a tensor on one side only"
        elif not _same_value(a.get("value"), e.get("value"), loose=not tight, rtol=rtol, atol=atol):
            return f"{what} {name} after the call: {a.get('value')!r} instead of {e.get('value')!r}"
    return None


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


@dataclass
class Comparison:
    """``compare_arms``' answer: the mismatches, error statistics per check, and the
    original's own behaviour the rewrite was judged against."""

    mismatches: list[Mismatch]
    eager: Stats
    compiled: Stats
    baseline: list[str] = field(default_factory=list)  # one line each, for the reader
    spread_eager: float = 0.0  # max abs difference of two eager runs of the original
    spread_compiled: float = 0.0  # max abs difference of the original's compiled and eager runs


_VALUES = ("output", "grad", "structure")


def _spread(mismatches: list[Mismatch], stats: Stats) -> float:
    """The size of the original's own difference: its max abs error where values differ."""
    return stats.max_abs if any(m.kind in ("output", "grad") for m in mismatches) else 0.0


def compare_arms(before: ArmData, after: ArmData, *, rtol: Optional[float], atol: Optional[float]) -> Comparison:
    """All mismatches of ``after`` against ``before``, like with like: eager after vs eager
    before, compiled after vs compiled before, on the same seeds, weights and inputs.

    The original is its own baseline. Where two eager runs of it differ (the "before" arm runs
    each case twice from the same state: mode ``repeat``), the eager check allows twice that
    spread, and streams that vary by themselves are not held against the rewrite. Where its
    compiled run differs from its eager run (dropout draws other numbers under torch.compile,
    the compiler reorders arithmetic), the compiled check allows twice that spread; where it
    raises under torch.compile but not eagerly (or the other way round), the rewrite's compiled
    run is judged against the original's eager run, what the program means. Each such
    baseline is said in one line with its size.
    """
    lines = LineMap(before.root, after.root)
    same_lines = LineMap(before.root, before.root)
    result = Comparison([], Stats(), Stats())
    worst_eager: tuple[float, str, set[str]] = (0.0, "", set())
    worst_compiled: tuple[float, float, str] = (0.0, 0.0, "")
    raising: list[str] = []
    for index in sorted(before.cases):
        b_case = before.cases[index]
        a_case = after.cases.get(index)
        label = b_case.get("source", str(index))
        if a_case is None:
            result.mismatches.append(Mismatch("structure", "eager", label, "the case did not run in the after tree"))
            continue
        b_modes, a_modes = b_case["modes"], a_case["modes"]
        b_eager = b_modes.get("eager")
        if b_eager is None:
            continue
        b_eager_t = case_tensors(before.tensors, index, "eager")
        own = dict(actual_root=before.root, expected_root=before.root, lines=same_lines, rtol=rtol, atol=atol)
        common = dict(actual_root=after.root, expected_root=before.root, lines=lines, rtol=rtol, atol=atol)

        widen, noisy = 0.0, set()
        if "repeat" in b_modes:
            stats = Stats()
            own_diff = compare_outcomes(label, "eager", b_modes["repeat"], b_eager, case_tensors(before.tensors, index, "repeat"),
                                        b_eager_t, stats=stats, **own)
            spread = _spread(own_diff, stats)
            noisy = {m.kind for m in own_diff if m.kind not in _VALUES}
            widen = 2 * spread
            result.spread_eager = max(result.spread_eager, spread)
            if own_diff and (spread > worst_eager[0] or not worst_eager[1]):
                worst_eager = (max(spread, worst_eager[0]), label, worst_eager[2] | noisy)
            elif own_diff:
                worst_eager = (worst_eager[0], worst_eager[1], worst_eager[2] | noisy)
        if "eager" in a_modes:
            found = compare_outcomes(label, "eager", a_modes["eager"], b_eager, case_tensors(after.tensors, index, "eager"),
                                     b_eager_t, stats=result.eager, widen=widen, **common)
            result.mismatches += [m for m in found if m.kind not in noisy]

        if "compiled" not in a_modes:
            continue
        a_compiled_t = case_tensors(after.tensors, index, "compiled")
        b_compiled = b_modes.get("compiled")
        if b_compiled is None:
            result.mismatches += compare_outcomes(label, "compiled", a_modes["compiled"], b_eager, a_compiled_t, b_eager_t,
                                                  stats=result.compiled, **common)
            continue
        b_compiled_t = case_tensors(before.tensors, index, "compiled")
        b_exc, e_exc = b_compiled.get("exception"), b_eager.get("exception")
        if bool(b_exc) != bool(e_exc) or (b_exc and e_exc and b_exc["type"] != e_exc["type"]):
            # The original fails (or fails otherwise) only under torch.compile: the rewrite may
            # keep that behaviour or mend it into the eager one, nothing else.
            raising.append(label)
            like = compare_outcomes(label, "compiled", a_modes["compiled"], b_compiled, a_compiled_t, b_compiled_t,
                                    stats=result.compiled, **common)
            if like and compare_outcomes(label, "compiled", a_modes["compiled"], b_eager, a_compiled_t, b_eager_t, stats=Stats(), **common):
                result.mismatches += like
            continue
        stats = Stats()
        own_diff = compare_outcomes(label, "compiled", b_compiled, b_eager, b_compiled_t, b_eager_t, stats=stats, **own)
        spread = _spread(own_diff, stats)
        result.spread_compiled = max(result.spread_compiled, spread)
        if spread > worst_compiled[0]:
            worst_compiled = (spread, stats.max_rel, label)
        result.mismatches += compare_outcomes(label, "compiled", a_modes["compiled"], b_compiled, a_compiled_t, b_compiled_t,
                                              stats=result.compiled, widen=2 * spread, alternative=b_eager_t, **common)

    if worst_eager[1]:
        size = f"by up to {worst_eager[0]:.3g} (max abs, {worst_eager[1]})" if worst_eager[0] else f"({worst_eager[1]})"
        also = f"; its {', '.join(sorted(worst_eager[2]))} vary too and are not compared" if worst_eager[2] else ""
        result.baseline.append(
            f"the original is not deterministic: two eager runs from the same state, seed and inputs differ {size}{also}; "
            f"the rewrite's eager run is judged within twice that spread")
    if worst_compiled[2]:
        result.baseline.append(
            f"the original differs between eager and compiled by up to {worst_compiled[0]:.3g} (max abs, relative "
            f"{worst_compiled[1]:.3g}, {worst_compiled[2]}); the rewrite's compiled run is judged against the original's "
            f"compiled run within twice that spread")
    if raising:
        result.baseline.append(
            f"the original's compiled run raises where its eager run does not (or another exception) on {', '.join(raising[:3])}; "
            f"there the rewrite's compiled run may match either")
    return result
