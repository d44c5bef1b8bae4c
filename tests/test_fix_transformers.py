"""GM101 on real code: the fp16 overflow clamp of transformers 4.52.4's BART family.

The installed ``transformers`` package is copied whole into a temporary repository as its
own source (``src/transformers``); the models are built tiny from their configs in float16 on
CPU. ``apply_fixes`` runs the real loop (detect in a worker, GM1xx only, re-detect, write),
then a separate process compares the fixed source's outputs with the installed package's, on
an ordinary input and on one that overflows float16 (so the clamp's taken path is exercised).
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import transformers

from graphmend.config import load_config
from graphmend.fix import apply_fixes
from graphmend.model import Category
from graphmend.schemas import validate
from graphmend.transforms import _layout_guard

pytestmark = [pytest.mark.xdist_group("test_fix_transformers"), pytest.mark.slow]

# model -> (config class, model class); the BART family shares the encoder layer's clamp.
ALL_MODELS = {
    "bart": ("BartConfig", "BartModel"),
    "mbart": ("MBartConfig", "MBartModel"),
    "marian": ("MarianConfig", "MarianModel"),
    "pegasus": ("PegasusConfig", "PegasusModel"),
    "blenderbot": ("BlenderbotConfig", "BlenderbotModel"),
    "blenderbot_small": ("BlenderbotSmallConfig", "BlenderbotSmallModel"),
}

# Each target costs two worker runs (detect, re-detect), so the suite runs bart only (its
# clamp is guarded by isinf/isnan(...).any(): a break). The whole family, including mbart,
# pegasus and blenderbot (an unconditional clamp: no break): GRAPHMEND_HF_MODELS=all, or a
# comma-separated list of names.
_chosen = os.environ.get("GRAPHMEND_HF_MODELS", "bart")
MODELS = dict(ALL_MODELS) if _chosen == "all" else {n: ALL_MODELS[n] for n in _chosen.split(",")}
WITH_BREAK = {"bart", "marian", "blenderbot_small"} & set(MODELS)

TARGETS = '''\
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import transformers  # noqa: E402

SEQ = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
           pad_token_id=1, decoder_start_token_id=2)


def build(config_cls, model_cls, dtype=torch.float16, device="cpu", overflow=False):
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**SEQ))
    if overflow:
        with torch.no_grad():  # large enough that the first encoder layer overflows float16
            model.encoder.layers[0].fc2.weight.mul_(4000.0)
    ids = torch.randint(3, 64, (1, 8), device=device)
    return model.to(device=device, dtype=dtype).eval(), (), {"input_ids": ids, "decoder_input_ids": ids}

'''

for _name, (_cfg, _cls) in MODELS.items():
    TARGETS += f"\ndef tiny_{_name}(dtype=torch.float16, device='cpu'):\n    return build({_cfg!r}, {_cls!r}, dtype, device)\n"

CONFIG = "paths: [src/]\nfix: {select: [GM1]}\ntargets:\n" + "".join(
    f'  - {{name: {n}, entry: "tools.graphmend_targets:tiny_{n}", device: cpu, dtype: float16, backend: eager}}\n'
    for n in MODELS
)

# Runs in a fresh process: the same model from the fixed copy and from the installed package.
COMPARE = r'''
import json, sys
from pathlib import Path
import torch
root, which = Path(sys.argv[1]), sys.argv[2]
if which == "fixed":
    sys.path.insert(0, str(root / "src"))
sys.path.insert(0, str(root))
import transformers
from tools import graphmend_targets as t
assert (Path(transformers.__file__).resolve().is_relative_to(root.resolve())) == (which == "fixed")
out = {}
for name, (cfg, cls) in json.loads(sys.argv[3]).items():
    for overflow in (False, True):
        model, args, kwargs = t.build(cfg, cls, overflow=overflow)
        with torch.no_grad():
            eager = model(*args, **kwargs).last_hidden_state
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="eager")(*args, **kwargs).last_hidden_state
        out[f"{name}/{overflow}"] = {"eager": eager.float().tolist(), "compiled": compiled.float().tolist(),
                                     "dtype": str(eager.dtype)}
print(json.dumps(out))
'''

DATA_DEPENDENT = (Category.DATA_DEPENDENT_BRANCH, Category.SKIPPED_FRAME)


def _gm101(breaks, target):
    """The breaks GM101 is about: the branch itself, and the frame Dynamo skipped because of it."""
    return [b for b in breaks if b.target == target and (b.category is Category.DATA_DEPENDENT_BRANCH or b.rule == "GM101")]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    assert transformers.__version__ == "4.52.4"
    root = tmp_path_factory.mktemp("hf-fix")
    start = time.perf_counter()
    shutil.copytree(Path(transformers.__file__).parent, root / "src" / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    copy_s = time.perf_counter() - start
    (root / "tools").mkdir()
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "graphmend_targets.py").write_text(TARGETS)
    (root / "graphmend.yml").write_text(CONFIG)
    originals = {n: (root / f"src/transformers/models/{n}/modeling_{n}.py").read_text() for n in MODELS}
    start = time.perf_counter()
    report = apply_fixes(load_config(root))
    fix_s = time.perf_counter() - start
    print(f"\ncopy of transformers: {copy_s:.1f}s; fix loop over {len(MODELS)} targets: {fix_s:.1f}s, {report.rounds} round(s)")
    return root, report, originals


def test_clamp_branches_reach_zero_and_table(fixed):
    root, report, _ = fixed
    assert not report.errors and not report.failed, (report.errors, report.failed)
    rows = []
    for t in report.targets:
        assert t.error is None, t.error
        before, after = _gm101(report.found, t.name), _gm101(report.remaining, t.name)
        rows.append((t.name, len(before), len(after), t.breaks_before, t.breaks_after, t.graphs_before, t.graphs_after))
        assert after == [], [(b.file, b.line, b.reason) for b in after]
    print("\nmodel             GM101-breaks before->after  all-breaks before->after  graphs before->after")
    for name, b, a, tb, ta, gb, ga in rows:
        print(f"{name:<17} {b:>2} -> {a:<2}                       {tb:>2} -> {ta:<2}                   {gb:>2} -> {ga}")
    with_clamp_break = {r[0] for r in rows if r[1] > 0}
    # bart, marian and blenderbot_small guard the clamp with isinf/isnan(...).any(): a break;
    # mbart, pegasus and blenderbot clamp unconditionally in fp16: no break to begin with.
    assert with_clamp_break == WITH_BREAK
    assert all(f.rule == "GM101" and f.safety.value == "safe" for f in report.applied)
    validate("fix", __import__("graphmend.model", fromlist=["to_dict"]).to_dict(report))


def test_fixed_source_is_the_0d_where_and_nothing_else_changed(fixed):
    root, report, originals = fixed
    changed = {c.file for c in report.changes}
    assert changed == {f"src/transformers/models/{n}/modeling_{n}.py" for n in WITH_BREAK}
    for n in WITH_BREAK:
        new = (root / f"src/transformers/models/{n}/modeling_{n}.py").read_text()
        assert "torch.isinf(hidden_states).any() | torch.isnan(hidden_states).any()," in new
        assert "if hidden_states.dtype == torch.float16 and _graphmend_strided(hidden_states):\n" in new
        old_lines, new_lines = originals[n].splitlines(), new.splitlines()
        # the layout guard's helper inserted once, the select and its guard in front of the kept
        # `if` (now its `elif`): no other line of the file changes
        hunks = [op for op in difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False).get_opcodes()
                 if op[0] != "equal"]
        removed = [line for _, i1, i2, _, _ in hunks for line in old_lines[i1:i2]]
        added = "\n".join(line for _, _, _, j1, j2 in hunks for line in new_lines[j1:j2])
        assert [line.strip() for line in removed] == ["if hidden_states.dtype == torch.float16 and ("], removed
        assert added.count("def _graphmend_strided(") == 1 and "elif hidden_states.dtype == torch.float16 and (" in added
        helper_lines = _layout_guard.helper_code("torch").count("\n")
        assert len(added.splitlines()) - helper_lines <= 14, added


def test_outputs_equal_eager_and_compiled(fixed):
    root, _, _ = fixed
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = {}
    for which in ("fixed", "installed"):
        done = subprocess.run([sys.executable, "-c", COMPARE, str(root), which, json.dumps(MODELS)],
                              capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[which] = json.loads(done.stdout.strip().splitlines()[-1])
    import torch

    overflowed = 0
    for key, want in runs["installed"].items():
        got = runs["fixed"][key]
        assert got["dtype"] == want["dtype"] == "torch.float16"
        for mode in ("eager", "compiled"):
            a, b = torch.tensor(got[mode]), torch.tensor(want[mode])
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=f"{key} {mode}")
        overflowed += key.endswith("True")
    assert overflowed == len(MODELS)


# GM303 on real code: XLM and FlauBERT check `assert lengths.max().item() <= slen` in forward and
# in the module-level helper get_masks. Their modeling files are copied (relative imports made
# absolute), fixed with GM303 alone, and compiled: one graph, the same outputs, and the failing
# check (a length past the sequence) still raises AssertionError, eagerly and compiled.
ASSERT_COMPARE = r'''
import json, sys, importlib
import torch, transformers
sys.path.insert(0, sys.argv[1])
out = {}
for name, cls, config in json.loads(sys.argv[2]):
    cfg = getattr(transformers, config)(vocab_size=64, emb_dim=16, n_layers=1, n_heads=2, max_position_embeddings=32)
    built = {}
    for which in ("original", "fixed"):
        torch.manual_seed(0)
        built[which] = getattr(importlib.import_module(f"{which}.modeling_{name}"), cls)(cfg).eval()
    ids = torch.randint(3, 60, (2, 8), generator=torch.Generator().manual_seed(1))
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(built["fixed"], backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    row = {}
    with torch.no_grad():
        want = built["original"](input_ids=ids).last_hidden_state
        row["eager_equal"] = torch.equal(built["fixed"](input_ids=ids).last_hidden_state, want)
        row["compiled_equal"] = torch.equal(compiled(input_ids=ids).last_hidden_state, want)
        row["graphs"] = len(graphs)
        for arm, model in (("original", built["original"]), ("compiled", compiled)):
            try:
                model(input_ids=ids, lengths=torch.tensor([8, 9]))
                row[arm + "_fails"] = "no error"
            except Exception as exc:
                row[arm + "_fails"] = type(exc).__name__
    out[name] = row
print(json.dumps(out))
'''


@pytest.mark.parametrize("names", [[("xlm", "XLMModel", "XLMConfig"), ("flaubert", "FlaubertModel", "FlaubertConfig")]])
def test_gm303_reaches_one_graph_on_xlm_and_flaubert(tmp_path, names):
    from benchmarks.side_effects_table import copy_modeling_source
    from graphmend.model import Safety
    from graphmend.transforms.base import RuleContext
    from graphmend.transforms.engine import fix_text
    from graphmend.transforms.registry import get_rule

    for which in ("original", "fixed"):
        (tmp_path / which).mkdir()
        (tmp_path / which / "__init__.py").write_text("")
    for name, _, _ in names:
        text = copy_modeling_source(name, f"modeling_{name}")
        rel = f"fixed/modeling_{name}.py"
        result = fix_text(rel, text, RuleContext(file=rel, threshold=Safety.SAFE, device="cpu", dtype="float32"),
                          [get_rule("GM303")])
        # the check in forward and the one in get_masks (lowered only under this file's entries)
        assert [f.line for f in result.applied] == sorted(
            i + 1 for i, line in enumerate(text.splitlines()) if "assert lengths.max().item() <= slen" in line), result.declined
        assert "entries=(" in result.text
        (tmp_path / "original" / f"modeling_{name}.py").write_text(text)
        (tmp_path / rel).write_text(result.text)
    proc = subprocess.run([sys.executable, "-c", ASSERT_COMPARE, str(tmp_path), json.dumps(names)], capture_output=True,
                          text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, _, _ in names:
        row = report[name]
        assert row == {"eager_equal": True, "compiled_equal": True, "graphs": 1,
                       "original_fails": "AssertionError", "compiled_fails": "AssertionError"}, (name, row)
