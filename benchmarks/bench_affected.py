"""Benchmark (not a test): ``graphmend pr`` on a repository of many tiny transformers models.

It writes a throwaway git repository with N targets: tiny models of several architectures
(built from transformers configs, random weights, no download), each behind an in-repository
wrapper module ``models/<arch>.py`` whose targets import it lazily (``tools/targets.py``). Then:

1. a README-only pull request, with an empty cache: the base runs every target (cold), the head none;
2. a pull request that adds a graph break to one wrapper module, with the now warm cache: only
   the targets that read that module run, on the head;
3. the same targets analysed alone (``check`` on the head), the reference for step 2;
4. with ``--shards K``: the same pull request as K shards, merged (each shard's wall time).

It prints the measured figures: wall seconds, targets analysed and carried forward, cache state.
The figures measured at 40 targets are in docs/action.md ("Measured").

    python benchmarks/bench_affected.py [--targets 40] [--tracing 1] [--shards 4] [--all-targets]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

TINY = dict(vocab_size=99, max_position_embeddings=64)
# architecture -> (config class, model class, settings; the layer count's name)
ARCHS = {
    "bert": ("BertConfig", "BertModel", dict(hidden_size=32, num_attention_heads=2, intermediate_size=37), "num_hidden_layers"),
    "roberta": ("RobertaConfig", "RobertaModel", dict(hidden_size=32, num_attention_heads=2, intermediate_size=37,
                                                      pad_token_id=1), "num_hidden_layers"),
    "electra": ("ElectraConfig", "ElectraModel", dict(hidden_size=32, embedding_size=16, num_attention_heads=2,
                                                      intermediate_size=37), "num_hidden_layers"),
    "albert": ("AlbertConfig", "AlbertModel", dict(hidden_size=32, embedding_size=16, num_attention_heads=2,
                                                   intermediate_size=37), "num_hidden_layers"),
    "gpt2": ("GPT2Config", "GPT2Model", dict(n_embd=32, n_head=2, n_positions=64), "n_layer"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(dim=32, n_heads=2, hidden_dim=37), "n_layers"),
    "opt": ("OPTConfig", "OPTModel", dict(hidden_size=32, num_attention_heads=2, ffn_dim=37, word_embed_proj_dim=32),
            "num_hidden_layers"),
    "bloom": ("BloomConfig", "BloomModel", dict(hidden_size=32, n_head=2), "n_layer"),
}

WRAPPER = '''"""Serving wrapper of a tiny {arch} model."""

import torch
from transformers import {cfg}, {model}


class Head(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        hidden = self.model(input_ids=input_ids).last_hidden_state
        pooled = hidden.mean(dim=1)
        return torch.tanh(pooled)


def build(variant):
    torch.manual_seed(variant)
    config = {cfg}(**{settings!r}, {layers}=1 + variant % 2)
    return Head({model}(config)).eval(), (torch.randint(3, 99, (2, 8)),)
'''

BREAK = ("        pooled = hidden.mean(dim=1)\n",
         "        pooled = hidden.mean(dim=1)\n        if pooled.sum() > 0:\n            pooled = pooled * 0.5\n")


def git(root: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@example.com")
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout.strip()


def commit(root: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def make_repo(root: Path, n: int, broken: str = "", tracing: int = 0) -> tuple[str, dict[str, str]]:
    """(base sha, target -> arch): the architectures in turn, or with ``tracing`` > 0 that many
    targets of ``broken`` and the others' in turn."""
    archs = list(ARCHS)
    owner = {f"t{i:03d}": archs[i % len(archs)] for i in range(n)}
    if tracing:
        others = [a for a in archs if a != broken]
        owner = {f"t{i:03d}": broken if i < tracing else others[i % len(others)] for i in range(n)}
    files = {"README.md": "# tiny models\n", "models/__init__.py": "", "tools/__init__.py": ""}
    for arch, (cfg, model, settings, layers) in ARCHS.items():
        files[f"models/{arch}.py"] = WRAPPER.format(arch=arch, cfg=cfg, model=model, settings={**TINY, **settings},
                                                    layers=layers)
    # Each target imports its own wrapper inside its function: a module-level import of every
    # wrapper would make every target read every wrapper, and every change affect all of them.
    funcs = [f"def {name}():\n    from models.{arch} import build\n\n    return build({i})\n"
             for i, (name, arch) in enumerate(owner.items())]
    files["tools/targets.py"] = "\n\n".join(funcs)
    targets = "\n".join(f"  - {{name: {name}, entry: 'tools.targets:{name}', device: cpu, backend: eager}}" for name in owner)
    files["graphmend.yml"] = f"paths: [models/]\ntargets:\n{targets}\nsandbox:\n  timeout_s: 900\n"
    git(root, "init", "-q", "-b", "main")
    return commit(root, files, "base"), owner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=40, help="how many targets (default: 40)")
    parser.add_argument("--arch", default="gpt2", choices=sorted(ARCHS), help="whose wrapper the pull request breaks")
    parser.add_argument("--tracing", type=int, default=0, metavar="K",
                        help="how many targets trace the broken wrapper (default: the architectures in turn, "
                             "so targets/8 of them)")
    parser.add_argument("--shards", type=int, default=0, help="also run the pull request as this many shards, merged")
    parser.add_argument("--all-targets", action="store_true", help="also time the pull request with --all-targets")
    args = parser.parse_args()

    import dataclasses

    import torch

    from graphmend.check import check
    from graphmend.config import load_config
    from graphmend.pr import analyse
    from graphmend.shard import merge

    with tempfile.TemporaryDirectory(prefix="graphmend-bench-affected-") as tmp:
        root, cache = Path(tmp) / "repo", Path(tmp) / "cache"
        root.mkdir()
        base, owner = make_repo(root, args.targets, args.arch, args.tracing)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"torch {torch.__version__}, {os.cpu_count()} CPU(s) ({platform.processor() or platform.machine()}, "
              f"load {load}), {args.targets} targets over {len(set(owner.values()))} architectures "
              f"({sum(a == args.arch for a in owner.values())} of them {args.arch}), backend eager, CPU")

        def timed(label, fn):
            started = time.monotonic()
            value = fn()
            print(f"{label}: {time.monotonic() - started:.1f} s", flush=True)
            return value, time.monotonic() - started

        readme = commit(root, {"README.md": "# tiny models\n\nMore words.\n"}, "README only")
        cold, _ = timed("1. README-only PR, cold cache (the base runs every target)",
                        lambda: analyse(root, base, readme, cache_dir=cache, propose_fixes=False))
        t = cold.review.timing
        print(f"   head: {t.targets_analysed} analysed, {t.targets_unaffected} unaffected; cache {t.cache}")

        git(root, "checkout", "-q", base)
        wrapper = (root / "models" / f"{args.arch}.py").read_text()
        broken = commit(root, {f"models/{args.arch}.py": wrapper.replace(*BREAK)}, f"a graph break in models/{args.arch}.py")
        warm, warm_s = timed(f"2. PR breaking models/{args.arch}.py, warm cache",
                             lambda: analyse(root, base, broken, cache_dir=cache, propose_fixes=False))
        t = warm.review.timing
        ran = sorted(x.name for x in warm.review.targets if x.status == "analysed")
        new = [f for f in warm.review.findings if f.status == "introduced"]
        print(f"   head: {t.targets_analysed} analysed ({', '.join(ran)}), {t.targets_unaffected} unaffected; "
              f"cache {t.cache}; {len(new)} introduced break(s); gate {'passed' if warm.verdict.passed else 'failed'}")
        print("   stages: " + ", ".join(f"{s.name} {s.seconds:.1f} s" for s in t.stages))

        config = load_config(root)
        _, alone_s = timed(f"3. the same {len(ran)} target(s) alone (check on the head)",
                           lambda: check(config, target_names=ran, static=False))
        one = ran[0]
        _, one_s = timed(f"   one of them alone ({one})", lambda: check(config, target_names=[one], static=False))
        print(f"   ratio: PR / those targets alone = {warm_s / alone_s:.2f}; PR / one target alone = {warm_s / one_s:.2f}; "
              f"load now {', '.join(f'{x:.1f}' for x in os.getloadavg())}")

        if args.shards:
            partials = []
            for i in range(1, args.shards + 1):
                part, _ = timed(f"4. shard {i}/{args.shards}",
                                lambda i=i: analyse(root, base, broken, cache_dir=cache, propose_fixes=False,
                                                    shard=(i, args.shards)))
                partials.append(part.review)
            merged, problems, verdict = merge(partials)
            same = ([dataclasses.astuple(f) for f in merged.findings] == [dataclasses.astuple(f) for f in warm.review.findings])
            print(f"   merged: {len(merged.findings)} finding(s), equal to the unsharded review's: {same}; "
                  f"problems: {problems or 'none'}; gate {'passed' if verdict.passed else 'failed'}")
        if args.all_targets:
            timed("5. the same PR with --all-targets", lambda: analyse(root, base, broken, cache_dir=cache,
                                                                       propose_fixes=False, all_targets=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
