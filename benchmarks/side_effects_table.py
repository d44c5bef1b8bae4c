"""Benchmark-style table (not a test): GM2xx/GM3xx on real transformers models, before -> after.

For each model it writes a throwaway git repository whose source is transformers' own
``modeling_<model>.py`` (copied, relative imports made absolute), a targets module building
the model tiny from a config (random weights, no download) and a ``graphmend.yml``; commits
it; runs the fix loop (``graphmend fix``: real dynamic detection in a worker, every rule on
the break lines at ``fix.safety: safe``, re-detection, write); then ``verify`` compares the
committed tree with the fixed one (outputs eager and compiled, printed text, log records,
warnings). Breaks and graphs before and after are the fix loop's counts.

    python benchmarks/side_effects_table.py [--models t5,bart,...] [--dtypes float32,float16]

The test ``tests/test_fix_transformers_side_effects.py`` runs the same pipeline on one model.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# model -> (transformers sub-package, modeling module, class, config class, config kwargs, input kind)
_SEQ2SEQ = dict(vocab_size=99, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
MODELS: dict[str, tuple[str, str, str, str, dict, str]] = {
    "t5": ("t5", "modeling_t5", "T5ForConditionalGeneration", "T5Config",
           dict(vocab_size=99, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2), "seq2seq"),
    "bart": ("bart", "modeling_bart", "BartForConditionalGeneration", "BartConfig", _SEQ2SEQ, "seq2seq"),
    "marian": ("marian", "modeling_marian", "MarianMTModel", "MarianConfig",
               dict(_SEQ2SEQ, pad_token_id=0, decoder_start_token_id=0), "seq2seq"),
    "pegasus": ("pegasus", "modeling_pegasus", "PegasusForConditionalGeneration", "PegasusConfig", _SEQ2SEQ, "seq2seq"),
    "whisper": ("whisper", "modeling_whisper", "WhisperForConditionalGeneration", "WhisperConfig",
                dict(vocab_size=99, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
                     max_source_positions=16, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                     eos_token_id=2, decoder_start_token_id=1), "speech"),
    "biogpt": ("biogpt", "modeling_biogpt", "BioGptForCausalLM", "BioGptConfig",
               dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                    max_position_embeddings=64), "causal"),
    "layoutlmv3": ("layoutlmv3", "modeling_layoutlmv3", "LayoutLMv3Model", "LayoutLMv3Config",
                   dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, max_2d_position_embeddings=128, coordinate_size=2, shape_size=4,
                        input_size=32, patch_size=16, visual_embed=False, has_relative_attention_bias=False,
                        has_spatial_attention_bias=False), "layout"),
}

TARGETS = '''"""Targets: transformers models built tiny from configs, from this repository's copied source."""

import torch
import transformers

from hfcopy.{module} import {cls}


def tiny(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    config = transformers.{config}(**{kwargs!r})
    model = {cls}(config).to(device=device, dtype=dtype).eval()
    ids = torch.randint(3, 99, (1, 8), device=device)
    dec = torch.randint(3, 99, (1, 5), device=device)
    kind = {kind!r}
    if kind == "seq2seq":
        return model, (), {{"input_ids": ids, "decoder_input_ids": dec}}
    if kind == "speech":
        return model, (), {{"input_features": torch.randn(1, 8, 32, device=device, dtype=dtype), "decoder_input_ids": dec}}
    if kind == "layout":
        box = torch.randint(0, 50, (1, 8, 4), device=device)
        box[..., 2:] += box[..., :2]
        return model, (), {{"input_ids": ids, "bbox": box}}
    return model, (), {{"input_ids": ids}}
'''

CONFIG = """paths: [hfcopy/]
targets:
  - name: tiny-{name}
    entry: tools.targets:tiny
    device: cpu
    dtype: {dtype}
    backend: eager
sandbox:
  timeout_s: 600
fix:
  safety: safe
"""


def copy_modeling_source(subpackage: str, module: str) -> str:
    """transformers' modeling file with its relative imports made absolute (it is our source now)."""
    import transformers

    path = Path(transformers.__file__).parent / "models" / subpackage / f"{module}.py"
    text = path.read_text()
    text = re.sub(r"^(\s*)from \.\.\.(\w)", r"\1from transformers.\2", text, flags=re.M)
    text = re.sub(r"^(\s*)from \.\.(\w)", r"\1from transformers.models.\2", text, flags=re.M)
    text = re.sub(r"^(\s*)from \.(\w)", rf"\1from transformers.models.{subpackage}.\2", text, flags=re.M)
    return text


def write_repo(root: Path, name: str, dtype: str = "float32") -> Path:
    subpackage, module, cls, config, kwargs, kind = MODELS[name]
    (root / "hfcopy").mkdir(parents=True)
    (root / "hfcopy" / "__init__.py").write_text("")
    (root / "hfcopy" / f"{module}.py").write_text(copy_modeling_source(subpackage, module))
    (root / "tools").mkdir()
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "targets.py").write_text(TARGETS.format(module=module, cls=cls, config=config, kwargs=kwargs, kind=kind))
    (root / "graphmend.yml").write_text(CONFIG.format(name=name, dtype=dtype))
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "before"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


@dataclass
class Row:
    model: str
    dtype: str
    breaks_before: int
    outside_before: int
    deferrable_before: int
    graphs_before: Optional[int]
    fixes: str
    breaks_after: Optional[int]
    deferrable_after: int
    graphs_after: Optional[int]
    equivalent: bool
    detail: str
    seconds: float


DEFERRABLE = ("GM2", "GM3")


def fix_and_verify(root: Path) -> Row:
    """``graphmend fix`` (the fix loop, dynamic mode, safe) then ``graphmend verify``: one row."""
    from graphmend.config import load_config
    from graphmend.fix import apply_fixes
    from graphmend.verify import verify

    start = time.time()
    config = load_config(root)
    report = apply_fixes(config)
    [summary] = report.targets
    if summary.error or report.errors or report.failed:
        raise RuntimeError(f"{root.name}: {summary.error or report.errors or report.failed}")
    # verify compares the committed tree with the fixed one; the fix loop counted the breaks. A model
    # with nothing fixed in the repository (layoutlmv3: its break is in transformers' modeling_utils.py,
    # outside this one-file copy) leaves the trees identical: run anyway, its compiled outputs against eager.
    [target] = verify(config, count_breaks=False, run_unchanged=True).targets
    detail = "; ".join(f"{m.kind}/{m.check}: {m.detail}" for m in target.mismatches[:3]) or (target.error or "")
    counts: dict[str, int] = {}
    for fix in report.applied:
        counts[fix.rule] = counts.get(fix.rule, 0) + 1

    def deferrable(breaks) -> int:
        return sum(1 for b in breaks if (b.rule or "").startswith(DEFERRABLE) and not b.outside_paths)

    return Row(
        model=root.name.split("-")[0],
        dtype=config.targets[0].dtype,
        breaks_before=summary.breaks_before,
        outside_before=sum(1 for b in report.found if b.outside_paths),
        deferrable_before=deferrable(report.found),
        graphs_before=summary.graphs_before,
        fixes=" ".join(f"{k}x{v}" for k, v in sorted(counts.items())) or "-",
        breaks_after=summary.breaks_after,
        deferrable_after=deferrable(report.remaining),
        graphs_after=summary.graphs_after,
        equivalent=target.ok,
        detail=detail,
        seconds=time.time() - start,
    )


def table(rows: list[Row]) -> str:
    head = ("| model | dtype | breaks before -> after | of them outside the repository | GM2xx/GM3xx breaks in the repository "
            "before -> after | graphs before -> after | fixes applied | outputs equal |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.dtype} | {r.breaks_before} -> {r.breaks_after} | {r.outside_before} | {r.deferrable_before} -> {r.deferrable_after} | "
            f"{r.graphs_before} -> {r.graphs_after} | {r.fixes} | {'yes' if r.equivalent else 'NO: ' + r.detail} |"
        )
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default="float32,float16")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphmend-side-effects-") as tmp:
        for dtype in args.dtypes.split(","):
            for name in args.models.split(","):
                root = write_repo(Path(tmp) / f"{name}-{dtype}", name, dtype)
                try:
                    row = fix_and_verify(root)
                except Exception as exc:  # noqa: BLE001 - one model failing is a row, not the end
                    print(f"{name} {dtype}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                rows.append(row)
                print(f"{name} {dtype}: done in {row.seconds:.0f}s", file=sys.stderr)
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, CPU, backend eager, eval mode")
    print(table(rows))
    return 0 if rows and all(r.equivalent and r.deferrable_after == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
