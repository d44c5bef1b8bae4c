"""Static detection on small model repositories written here (real libcst, real files)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from graphmend.config import Config, load_config
from graphmend.detect import static as static_mod
from graphmend.detect.static import PARALLEL_MIN_FILES, detect_static
from graphmend.model import Category, Lever
from graphmend.sources import suppressed

REPO = Path(__file__).resolve().parents[2]

MODEL = '''\
import logging
import warnings
import torch
from torch import nn
from .rope import pick_freqs

logger = logging.getLogger(__name__)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, h, flag):
        h = self.lin(h)
        if h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):
            h = h.clamp(-1, 1)
        if flag:
            h = h * 2
        if torch.isnan(h).any():
            raise ValueError("nan in h")
        print("debug", h.shape)
        logger.warning("x")
        warnings.warn("careful")
        n = h.sum().item()
        if n > 3:
            h = h + 1
        h = self._helper(h)
        return h if h.max() > 0 else -h

    def _helper(self, x):
        if x.shape[0] > 2 and x is not None:
            x = x + 1
        return pick_freqs(x)

    def unused(self, x):
        if x.sum() > 0:
            print("never compiled")


def plain(x):
    if x.sum() > 0:
        print("not compiled")


class NotAModule:
    def forward(self, x):
        print("not a module")
        if x.any():
            return x
'''

ROPE = '''\
import torch


def pick_freqs(position_ids):
    seq_len = position_ids.max() + 1
    limit = 8
    if seq_len > limit:
        return position_ids * 2
    return position_ids
'''


def _write(root: Path, files: dict[str, str]) -> Config:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return Config(root=root.resolve())


def _sites(result) -> set[tuple]:
    return {(b.file, b.line, b.category, b.rule, b.gb_id) for b in result.breaks}


def test_finds_the_fixable_sites_of_a_small_model_repo(tmp_path):
    config = _write(tmp_path, {"pkg/__init__.py": "", "pkg/model.py": MODEL, "pkg/rope.py": ROPE})
    result = detect_static(config)
    assert result.errors == ()
    assert _sites(result) == {
        ("pkg/model.py", 17, Category.DATA_DEPENDENT_BRANCH, "GM101", "GB0170"),
        ("pkg/model.py", 21, Category.VALIDATION, "GM301", "GB0170"),
        ("pkg/model.py", 23, Category.SIDE_EFFECT, "GM201", "GB0059"),
        ("pkg/model.py", 24, Category.SIDE_EFFECT, "GM202", "GB0291"),
        ("pkg/model.py", 25, Category.SIDE_EFFECT, "GM203", "GB0007"),
        # the scalar read is reported where it happens (Dynamo breaks there), not at the `if`
        ("pkg/model.py", 26, Category.SCALAR, None, "GB0124"),
        ("pkg/model.py", 30, Category.DATA_DEPENDENT_BRANCH, "GM101", "GB0170"),
        # reached through self._helper -> an imported function of another file
        ("pkg/rope.py", 7, Category.DATA_DEPENDENT_BRANCH, "GM101", "GB0170"),
    }
    by_line = {(b.file, b.line): b for b in result.breaks}
    clamp = by_line[("pkg/model.py", 17)]
    assert clamp.verified is False and clamp.fixable and clamp.lever is Lever.RULE
    assert clamp.function == "Encoder.forward" and clamp.col == 8
    assert clamp.source_line.startswith("if h.dtype == torch.float16")
    assert "`torch.isinf(h).any()`" in clamp.reason and "GM101" in clamp.reason
    assert clamp.doc_url.endswith("/gb0170.html")
    assert by_line[("pkg/model.py", 30)].col == 15  # the conditional expression itself
    rope = by_line[("pkg/rope.py", 7)]
    assert rope.function == "pick_freqs" and "reached from `Encoder.forward`" in rope.reason
    scalar = by_line[("pkg/model.py", 26)]
    assert not scalar.fixable and "h.sum().item()" in scalar.reason
    assert result.files_scanned == 3 and result.files_parsed == 2  # __init__.py never says torch
    assert len({b.fingerprint for b in result.breaks}) == len(result.breaks)


def test_nothing_is_reported_outside_compiled_regions(tmp_path):
    config = _write(tmp_path, {"pkg/__init__.py": "", "pkg/model.py": MODEL, "pkg/rope.py": ROPE})
    functions = {b.function for b in detect_static(config).breaks}
    assert functions == {"Encoder.forward", "pick_freqs"}
    assert not {"plain", "Encoder.unused", "NotAModule.forward"} & functions


def test_use_def_trace_is_followed_and_bounded(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch

        @torch.compile
        def near(pos, limit):
            seq_len = pos.max() + 1
            longest = seq_len * 2
            if longest > limit:
                return pos
            return pos + 1

        @torch.compile
        def far(pos, limit):
            a = pos.max()
            b = a + 1
            c = b + 1
            d = c + 1
            e = d + 1
            f = e + 1
            if f > limit:
                return pos
            return pos

        @torch.compile
        def rebound(pos, limit):
            n = pos.max()
            n = pos.shape[0]
            if n > limit:
                return pos
            return pos
    '''})
    result = detect_static(config)
    lines = {(b.function, b.line) for b in result.breaks}
    # near: two hops back to `pos.max()`; far: six hops, beyond the bound (MAX_TRACE);
    # rebound: the binding that reaches the `if` is a shape, not data.
    assert lines == {("near", 7)}
    (b,) = result.breaks
    assert "`seq_len = pos.max() + 1` at line 5" in b.reason


def test_a_bare_parameter_is_not_assumed_to_be_a_tensor(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        from typing import Optional
        import torch
        from torch import nn

        class Gate(nn.Module):
            def forward(self, x, flag, mask: Optional[torch.Tensor] = None, scale: float = 1.0):
                if flag:
                    x = x * 2
                if x > 0:
                    x = x + 1
                if scale > 1.0:
                    x = x * scale
                if mask is not None:
                    x = x * mask
                if mask:
                    x = x + 1
                return x
    '''})
    result = detect_static(config)
    # only `if mask:` has evidence: the annotation says tensor and `bool()` of it reads data
    assert [(b.line, b.category) for b in result.breaks] == [(15, Category.DATA_DEPENDENT_BRANCH)]


def test_scalar_reads_are_classified_as_scalar_not_gm101(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch

        @torch.compile
        def f(x):
            if x.sum().item() > 0:
                x = x + 1
            if x.tolist()[0] > 0:
                x = x + 1
            if int(x.max()) > 3:
                x = x - 1
            if torch.equal(x, x):
                x = x * 2
            return x
    '''})
    result = detect_static(config)
    got = [(b.line, b.category, b.rule, b.fixable, b.gb_id) for b in result.breaks]
    assert got == [
        (5, Category.SCALAR, None, False, "GB0124"),
        (7, Category.SCALAR, None, False, None),  # tolist's id depends on the dtype
        (9, Category.SCALAR, None, False, None),
        (11, Category.DYNAMIC_SHAPE, None, False, "GB0033"),  # Dynamo: "Data dependent operator"
    ]


def test_a_traced_scalar_read_is_reported_once_at_the_read(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch

        @torch.compile
        def f(x):
            n = x.sum().item()
            if n > 3:
                x = x + 1
            if n < 0:
                x = x - 1
            same = torch.equal(x, -x)
            if same:
                x = x * 2
            return x
    '''})
    got = [(b.line, b.category, b.gb_id, b.source_line) for b in detect_static(config).breaks]
    assert got == [
        (5, Category.SCALAR, "GB0124", "n = x.sum().item()"),
        (10, Category.DYNAMIC_SHAPE, "GB0033", "same = torch.equal(x, -x)"),
    ]


def test_torch_equal_guarding_a_raise_is_a_validation(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch

        @torch.compile
        def f(a, b):
            if not torch.equal(a, b):
                raise ValueError("a and b differ")
            if a.sum() > 0:
                raise ValueError("positive")
                print("unreachable but more than a raise")
            return a
    '''})
    got = [(b.line, b.category, b.rule) for b in detect_static(config).breaks]
    assert got == [
        (5, Category.VALIDATION, "GM301"),
        # a body that is more than the raise is still a data-dependent branch (GM101's to judge)
        (7, Category.DATA_DEPENDENT_BRANCH, "GM101"),
        (9, Category.SIDE_EFFECT, "GM201"),
    ]


def test_suppression_comments(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch

        @torch.compile
        def f(x):
            print("a")  # graphmend: ignore
            print("b")  # graphmend: ignore[GM201]
            print("c")  # graphmend: ignore[GM2]
            print("d")  # graphmend: ignore[GM101]
            if x.sum() > 0:  # graphmend: ignore[GM201, GM101]
                x = x + 1
            if x.item() > 0:  # graphmend: ignore[GM101]
                x = x + 1
            if x.item() < 0:  # graphmend: ignore
                x = x + 1
            return x
    '''})
    got = [(b.line, b.category) for b in detect_static(config).breaks]
    # `ignore[GM101]` does not silence a scalar read (it has no rule); the bare form does
    assert got == [(8, Category.SIDE_EFFECT), (11, Category.SCALAR)]


def test_suppressed_parses_codes_and_prefixes():
    assert suppressed("x = 1  # graphmend: ignore", "GM101")
    assert suppressed("x = 1  # graphmend: ignore", None)
    assert suppressed("x  #graphmend:ignore[GM101]", "GM101")
    assert suppressed("x  # graphmend: ignore[GM2, GM101]", "GM101")
    assert suppressed("x  # graphmend: ignore[gm2]", "GM203")
    assert not suppressed("x  # graphmend: ignore[GM2]", "GM101")
    assert not suppressed("x  # graphmend: ignore[GM101]", None)
    assert not suppressed("x  # noqa", "GM101")
    assert not suppressed("x  # graphmend: ignores", "GM101")


def test_compile_wrapping_disable_and_is_compiling_guards(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch
        from torch import nn

        def step(x):
            print("wrapped")
            return helper(x)

        def helper(x):
            if x.any():
                return x
            return -x

        step_c = torch.compile(step)

        class Block(nn.Module):
            def forward(self, x):
                self.report(x)
                if not torch.compiler.is_compiling():
                    print("eager only")
                if torch.compiler.is_compiling():
                    x = x + 1
                else:
                    print("eager only too")
                return x

            @torch.compiler.disable
            def report(self, x):
                print("runs eagerly by design")
    '''})
    got = {(b.function, b.line) for b in detect_static(config).breaks}
    assert got == {("step", 5), ("helper", 9)}


def test_module_subclass_across_files_and_transformers_style_bases(tmp_path):
    config = _write(tmp_path, {
        "lib/__init__.py": "",
        "lib/base.py": '''
            import torch
            from torch import nn

            class Base(nn.Module):
                def check(self, x):
                    if torch.isnan(x).any():
                        raise ValueError("nan")
        ''',
        "lib/block.py": '''
            import torch
            from lib.base import Base
            from transformers.modeling_utils import PreTrainedModel

            class Block(Base):
                def forward(self, x):
                    self.check(x)
                    return x

            class Model(PreTrainedModel):
                def forward(self, x):
                    print("hi")
                    return x
        ''',
    })
    got = {(b.file, b.function, b.rule) for b in detect_static(config).breaks}
    assert got == {("lib/base.py", "Base.check", "GM301"), ("lib/block.py", "Model.forward", "GM201")}


def test_fingerprints_survive_unrelated_edits(tmp_path):
    body = '''
        import torch

        @torch.compile
        def f(x):
            print("a")
            if x.sum() > 0:
                x = x + 1
            print("a")
            return x
    '''
    first = detect_static(_write(tmp_path / "one", {"m.py": body})).breaks
    edited = body.replace("import torch\n", "import torch\n        import os\n\n        CONST = 3\n")
    result = detect_static(_write(tmp_path / "two", {"m.py": edited}))
    assert result.errors == ()
    second = result.breaks
    assert [b.line + 3 for b in first] == [b.line for b in second]
    assert [b.fingerprint for b in first] == [b.fingerprint for b in second]
    # the two identical prints in one function are told apart by occurrence
    assert len({b.fingerprint for b in first}) == 3


def test_files_restrict_what_is_reported_not_what_is_reachable(tmp_path):
    config = _write(tmp_path, {"pkg/__init__.py": "", "pkg/model.py": MODEL, "pkg/rope.py": ROPE})
    result = detect_static(config, files=["pkg/rope.py", "pkg/missing.py"])
    assert {(b.file, b.line) for b in result.breaks} == {("pkg/rope.py", 7)}
    assert [(e.path, e.message) for e in result.errors] == [("pkg/missing.py", "no such file or directory")]
    assert result.files_scanned == 1


def test_exclude_and_paths_are_honoured(tmp_path):
    root = tmp_path
    _write(root, {"src/m.py": ROPE.replace("def pick", "@torch.compile\ndef pick"),
                  "src/tests/t.py": ROPE.replace("def pick", "@torch.compile\ndef pick"),
                  "other/o.py": ROPE.replace("def pick", "@torch.compile\ndef pick")})
    (root / "graphmend.yml").write_text('paths: [src/]\nexclude: ["**/tests/**"]\n')
    result = detect_static(load_config(root))
    assert {b.file for b in result.breaks} == {"src/m.py"}


def test_many_files_are_parsed_in_a_process_pool_with_the_same_result(tmp_path, monkeypatch):
    files = {f"pkg/m{i:03d}.py": ROPE.replace("def pick", "@torch.compile\ndef pick") for i in range(PARALLEL_MIN_FILES + 6)}
    files["pkg/broken.py"] = "import torch\ndef f(:\n"
    config = _write(tmp_path, files)
    serial = detect_static(config, jobs=1)
    used = []
    real_pool = static_mod.concurrent.futures.ProcessPoolExecutor

    def spy(*args, **kwargs):
        used.append(kwargs.get("max_workers"))
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(static_mod.concurrent.futures, "ProcessPoolExecutor", spy)
    parallel = detect_static(config, jobs=2)
    assert used == [2]
    assert parallel == serial
    assert len(serial.breaks) == PARALLEL_MIN_FILES + 6
    assert [e.path for e in serial.errors] == ["pkg/broken.py"]


def test_examples_fixable_sites_and_a_quiet_clean_module():
    config = load_config(REPO / "examples")
    result = detect_static(config)
    assert result.errors == ()
    got = {(b.file, b.source_line.split("(")[0].strip(), b.category, b.rule) for b in result.breaks}
    assert got == {
        ("src/tinymodels/encoder.py", "if h.dtype == torch.float16 and", Category.DATA_DEPENDENT_BRANCH, "GM101"),
        ("src/tinymodels/encoder.py", "if", Category.VALIDATION, "GM301"),
        ("src/tinymodels/decoder.py", "if seq_len > self.original_max_position:", Category.DATA_DEPENDENT_BRANCH, "GM101"),
        ("src/tinymodels/decoder.py", "logger.warning_once", Category.SIDE_EFFECT, "GM202"),
        ("src/tinymodels/decoder.py", "print", Category.SIDE_EFFECT, "GM201"),
    }
    assert not [b for b in result.breaks if b.file.endswith("clean.py")]
    assert all(b.fixable and not b.verified for b in result.breaks)


def test_gb_ids_are_confirmed_by_the_installed_registry():
    for pair in (static_mod.GB_BRANCH, static_mod.GB_PRINT, static_mod.GB_LOGGER, static_mod.GB_WARN,
                 static_mod.GB_ITEM, static_mod.GB_DATA_OP):
        gb_id, gb_type, url = static_mod._gb(pair)
        assert (gb_id, gb_type) == pair and url.endswith(f"/{pair[0].lower()}.html")
    assert static_mod._gb(("GB0170", "some other text")) == (None, None, None)


def test_numpy_reductions_are_not_tensor_reads(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import numpy as np
        import torch

        @torch.compile
        def f(x, n):
            idx = np.array([1, 2, 3])
            idx = idx.reshape(3, 1) + 1
            if idx.max() > n:
                idx = idx - 1
            if x.max() > n:
                x = x - 1
            return x
    '''})
    assert [b.line for b in detect_static(config).breaks] == [10]


def test_tensors_from_torch_functions_count_as_evidence_classes_and_config_do_not(tmp_path):
    config = _write(tmp_path, {"m.py": '''
        import torch
        import torch.nn.functional as F

        @torch.compile
        def f(x):
            h = F.relu(x)
            if h > 0:
                x = x + 1
            lin = torch.nn.Linear(3, 3)
            if lin:
                x = x + 1
            if torch.cuda.is_available() and torch.is_grad_enabled():
                x = x + 1
            if x.equal(h):
                x = x + 1
            return x
    '''})
    got = [(b.line, b.category) for b in detect_static(config).breaks]
    assert got == [(7, Category.DATA_DEPENDENT_BRANCH), (14, Category.DYNAMIC_SHAPE)]
