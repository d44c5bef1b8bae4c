"""Benchmark (not a test): ``graphmend bench`` on three tiny Hugging Face transformers models.

It writes a throwaway git repository whose serving wrappers around tiny BERT, GPT-2 and T5
models (built from configs, random weights, no download) contain the tensor-dependent
branches that break Dynamo graphs in real serving code; commits it ("before"); rewrites the
wrappers the way GraphMend's predication rule does (``torch.where``, both arms evaluated);
then runs ``graphmend bench`` (and, with ``--verify``, ``graphmend verify``) on it and prints
the table.

    python benchmarks/bench_transformers.py [--backend inductor] [--rounds 1] [--batch 8]

Inductor on CPU compiles C++ and takes tens of seconds per graph on a small machine; use
``--backend aot_eager`` for a quick look (no code generation: cold start still counts Dynamo
tracing and graph breaks, steady state does not show generated-kernel speed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

WRAPPERS_BEFORE = '''\
"""Serving wrappers: tiny models behind the post-processing a service adds."""

import torch


class Head(torch.nn.Module):
    def __init__(self, model, key):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, **inputs):
        logits = self.model(**inputs)[self.key]
        if torch.isinf(logits).any():
            logits = logits.clamp(-1e4, 1e4)
        if logits.abs().amax() > 30.0:
            scaled = logits / 2.0
        else:
            scaled = logits * 1.0
        return torch.softmax(scaled, dim=-1)
'''

WRAPPERS_AFTER = '''\
"""Serving wrappers: tiny models behind the post-processing a service adds."""

import torch


class Head(torch.nn.Module):
    def __init__(self, model, key):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, **inputs):
        logits = self.model(**inputs)[self.key]
        logits = torch.where(torch.isinf(logits).any(), logits.clamp(-1e4, 1e4), logits)
        scaled = torch.where(logits.abs().amax() > 30.0, logits / 2.0, logits * 1.0)
        return torch.softmax(scaled, dim=-1)
'''

TARGETS = '''\
"""Tiny transformers models from configs (random weights), wrapped for serving."""

import torch
import transformers

from serving.wrappers import Head

SEQ = 32


def _ids(batch, vocab):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (batch, SEQ), generator=g)


def bert(batch=1, dtype=torch.float32):
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, num_labels=4, attn_implementation="eager")
    model = transformers.BertForSequenceClassification(cfg).to(dtype).eval()
    ids = _ids(batch, 1000)
    return Head(model, "logits"), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def gpt2(batch=1, dtype=torch.float32):
    cfg = transformers.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg).to(dtype).eval()
    ids = _ids(batch, 1000)
    return Head(model, "logits"), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def t5(batch=1, dtype=torch.float32):
    cfg = transformers.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                num_heads=4, decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(cfg).to(dtype).eval()
    ids = _ids(batch, 1000)
    return Head(model, "logits"), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                       "decoder_input_ids": ids[:, :8]}
'''


def config_text(backend: str, batch: int, warmup: int, repeat: int) -> str:
    targets = "\n".join(
        f"  - name: tiny-{name}\n    entry: serving.targets:{name}\n    device: cpu\n    backend: {backend}\n"
        f"    batch_arg: batch"
        for name in ("bert", "gpt2", "t5")
    )
    return f"paths: [serving/]\ntargets:\n{targets}\nsandbox:\n  timeout_s: 1800\nbench:\n  warmup: {warmup}\n  repeat: {repeat}\n  batch_sizes: [{batch}]\n"


def make_repo(root: Path, backend: str, batch: int, warmup: int, repeat: int) -> None:
    (root / "serving").mkdir(parents=True)
    (root / "serving/__init__.py").write_text("")
    (root / "serving/wrappers.py").write_text(WRAPPERS_BEFORE)
    (root / "serving/targets.py").write_text(TARGETS)
    (root / "graphmend.yml").write_text(config_text(backend, batch, warmup, repeat))
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "before"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)
    (root / "serving/wrappers.py").write_text(WRAPPERS_AFTER)


# Architectures whose breaks are all `assert t.item() <= n` input checks (GM303), measured with
# beyond_paper_table's arms: fresh process per arm, tiny from config, compiled outside the package.
ASSERT_MODELS = {
    name: (name, f"modeling_{name}", cls, f"{cls[:-5]}Config",
           dict(vocab_size=64, emb_dim=16, n_layers=1, n_heads=2, max_position_embeddings=32), False)
    for name, cls in (("xlm", "XLMModel"), ("flaubert", "FlaubertModel"))
}


def breaks_table(models: list[str], unsafe: bool) -> int:
    """Break sites baseline -> GM1-3 -> every rule, on the ASSERT_MODELS (``--breaks``)."""
    from benchmarks import beyond_paper_table as table

    table.MODELS.update(ASSERT_MODELS)
    table.__file__ = __file__  # its arms run this script (which knows ASSERT_MODELS)
    if unsafe:  # the rules' unsafe fixes too (what `graphmend fix --unsafe-fixes` applies)
        from graphmend.model import Safety
        from graphmend.transforms import base

        original = base.RuleContext.__init__

        def unsafe_init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            object.__setattr__(self, "threshold", Safety.UNSAFE)

        base.RuleContext.__init__ = unsafe_init  # type: ignore[method-assign]
    return table.main(["--models", ",".join(models)])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--arm":  # one arm of --breaks, in its own process
        from benchmarks import beyond_paper_table as table

        table.MODELS.update(ASSERT_MODELS)
        return table.main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--breaks", metavar="MODELS", help="instead of bench: break sites before/after on these "
                        f"architectures ({', '.join(ASSERT_MODELS)}), outputs compared")
    parser.add_argument("--unsafe-fixes", action="store_true", help="with --breaks: apply unsafe fixes too")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--verify", action="store_true", help="verify the rewrite too (backend eager)")
    parser.add_argument("--out", metavar="DIR", help="write bench.json, bench.md and bench.png here")
    args = parser.parse_args()
    if args.breaks:
        return breaks_table([m for m in args.breaks.split(",") if m], args.unsafe_fixes)

    from graphmend.bench import bench
    from graphmend.config import load_config
    from graphmend.model import to_dict
    from graphmend.report.markdown_verify import render_bench_markdown, render_bench_text, render_verify_text

    with tempfile.TemporaryDirectory(prefix="graphmend-bench-transformers-") as tmp:
        root = Path(tmp) / "repo"
        make_repo(root, args.backend, args.batch, args.warmup, args.repeat)
        config = load_config(root)
        if args.verify:
            from graphmend.verify import verify

            # Equivalence does not depend on the backend's speed: check it with the fast one.
            verify_config = dataclasses.replace(config, targets=tuple(dataclasses.replace(t, backend="eager") for t in config.targets))
            started = time.monotonic()
            report = verify(verify_config, progress=lambda m: print(m, file=sys.stderr, flush=True))
            print(render_verify_text(report))
            print(f"(verify took {time.monotonic() - started:.0f} s)", file=sys.stderr)
        started = time.monotonic()
        report = bench(config, progress=lambda m: print(m, file=sys.stderr, flush=True), rounds=args.rounds, threads=args.threads)
        elapsed = time.monotonic() - started
    print(render_bench_text(report))
    print(render_bench_markdown(report))
    print(f"(bench took {elapsed:.0f} s)")
    if args.out:
        import json

        from graphmend.report.chart import write_chart

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.json").write_text(json.dumps(to_dict(report), indent=2, sort_keys=True) + "\n")
        (out / "bench.md").write_text(render_bench_markdown(report))
        write_chart(out / "bench.png", bench_report=report)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
