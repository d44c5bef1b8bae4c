"""Benchmark-style table (not a test): breaks whose boundary is in another file, before -> after.

layoutlmv3, bros and flava (transformers 4.52.4) break on a ``warnings.warn`` in
``ModuleUtilsMixin.get_extended_attention_mask`` (``modeling_utils.py``), a file with no ``forward``
of its own; the model's ``forward`` that calls it lives in another file. So the whole installed
``transformers`` package is copied into a throwaway git repository as its source
(``src/transformers``), with a targets module building each model tiny from its config (fp32,
random weights, eval) and compiled outside the package (GraphMend's worker compiles the target's
callable). The real pipeline runs: the fix loop at the default safety (dynamic detection in a
worker, every rule, re-detection, write), then ``verify`` (the committed tree against the fixed
one: outputs eager and compiled, printed text, log records, warnings in order).

    python benchmarks/cross_file_table.py [--models layoutlmv3,bros,flava]

``tests/transforms/test_deferral_cross_file.py`` checks the mechanism on generated two-file packages
(the stacks Dynamo would report given to the rules; original and fixed run eager and compiled).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

_SMALL = dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
              max_position_embeddings=64)
# name -> (model class, config class, config kwargs, input kind)
MODELS: dict[str, tuple[str, str, dict, str]] = {
    "layoutlmv3": ("LayoutLMv3Model", "LayoutLMv3Config",
                   dict(_SMALL, max_2d_position_embeddings=128, coordinate_size=2, shape_size=4, input_size=32,
                        patch_size=16, visual_embed=False, has_relative_attention_bias=False,
                        has_spatial_attention_bias=False), "layout"),
    # Bros splits hidden_size / 4 over 8 box coordinates: 64 is the smallest that leaves each one a sinusoid.
    "bros": ("BrosModel", "BrosConfig", dict(_SMALL, hidden_size=64), "bros"),
    "flava": ("FlavaTextModel", "FlavaTextConfig", _SMALL, "text"),
}

TARGETS = '''"""Targets: transformers models built tiny from configs, from this repository's copied source."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import transformers  # noqa: E402


def build(cls, config, kwargs, kind, dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, config)(**kwargs)).to(device=device, dtype=dtype).eval()
    ids = torch.randint(3, 99, (1, 8), device=device)
    if kind == "layout":
        box = torch.randint(0, 50, (1, 8, 4), device=device)
        box[..., 2:] += box[..., :2]
        return model, (), {"input_ids": ids, "bbox": box}
    if kind == "bros":
        return model, (), {"input_ids": ids, "bbox": torch.rand(1, 8, 4, device=device, dtype=dtype)}
    return model, (), {"input_ids": ids}
'''

def write_repo(root: Path, names: list[str]) -> Path:
    import transformers

    from benchmarks.copied_repo import make_repo

    text = TARGETS
    for name in names:
        cls, config, kwargs, kind = MODELS[name]
        text += (f"\n\ndef tiny_{name}(dtype=torch.float32, device='cpu'):\n"
                 f"    return build({cls!r}, {config!r}, {kwargs!r}, {kind!r}, dtype, device)\n")
    return make_repo(root, [transformers], text, {name: f"tiny_{name}" for name in names})


def fix_and_verify(root: Path, progress=None):
    """The fix loop (written to the tree) then ``verify`` of the committed tree against it."""
    from graphmend.config import load_config
    from graphmend.fix import apply_fixes
    from graphmend.verify import verify

    config = load_config(root)
    report = apply_fixes(config, progress=progress)
    checked = verify(config, count_breaks=False, progress=progress)
    return report, checked


def table(report, checked) -> str:
    ok = {t.name: t for t in checked.targets}
    lines = ["| model | breaks before -> after | graphs before -> after | fixes applied | outputs, streams equal |",
             "|---|---|---|---|---|"]
    for t in report.targets:
        v = ok.get(t.name)
        if v is None:
            equal = "unchanged (no fix applied)" if not report.applied else "NO: not verified"
        else:
            detail = "; ".join(f"{m.kind}/{m.check}: {m.detail}" for m in v.mismatches[:3])
            equal = "yes" if v.ok else f"NO: {detail or v.error}"
        lines.append(f"| {t.name} | {t.breaks_before} -> {t.breaks_after} | {t.graphs_before} -> {t.graphs_after} | "
                     f"{', '.join(sorted({f'{f.rule} {f.file}:{f.line}' for f in report.applied})) or '-'} | {equal} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="graphmend-cross-file-") as tmp:
        root = write_repo(Path(tmp) / "repo", names)
        report, checked = fix_and_verify(root, progress=lambda m: print(m, file=sys.stderr, flush=True))
        for d in report.declined:
            print(f"declined {d.rule} {d.file}:{d.line}: {d.reason}", file=sys.stderr)
        for s in report.skipped:
            print(f"skipped {s.fix.rule} {s.fix.file}:{s.fix.line}: {s.reason}; {s.fix.notes}", file=sys.stderr)
        for c in report.changes:
            print(c.diff, file=sys.stderr)
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, CPU, fp32, eval, backend eager, "
          f"fix.safety safe ({time.time() - start:.0f} s)")
    print(table(report, checked))
    wrong = [t.name for t in checked.targets if not t.ok] + ([] if checked.targets or not report.applied else ["?"])
    return 1 if wrong or report.errors or report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
