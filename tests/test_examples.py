"""``examples/``: the demo repository's breaks, counted by hand, found exactly by ``graphmend check``;
``graphmend fix`` removes what it labels fixable, and the fixed models compute what they did."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphmend.schemas import validate
from tests.conftest import EXAMPLES


# one worker runs this module: its module-scoped fixture runs the targets once
pytestmark = [pytest.mark.xdist_group("test_examples"), pytest.mark.slow]

ENC, DEC, POOL, MOE, CLEAN = (f"src/tinymodels/{m}.py" for m in ("encoder", "decoder", "pooling", "moe", "clean"))

# The hand count: (file, line, category, GB id, rule, a piece of the source line).
HAND_COUNT = {
    "tiny-encoder": [
        # the fp16 overflow clamp in each layer; the encoder loops over its layers, so under
        # torch 2.13 the break also makes Dynamo skip the rest of the encoder's forward
        (ENC, 16, "data-dependent-branch", "GB0170", "GM101", "torch.isinf(h).any() or torch.isnan(h).any()"),
        (ENC, 16, "skipped-frame", "GB7000", "GM101", "torch.isinf(h).any() or torch.isnan(h).any()"),
        (ENC, 29, "validation", "GB0170", "GM301", "if (attention_mask.sum(dim=-1) == 0).any():"),
    ],
    "tiny-decoder": [
        (DEC, 23, "data-dependent-branch", "GB0170", "GM101", "if seq_len > self.original_max_position:"),
        (DEC, 42, "side-effect", "GB0291", "GM202", "logger.warning_once("),
        (DEC, 46, "side-effect", "GB0059", "GM201", 'print("decoder hidden", h.shape)'),
    ],
    "tiny-pooler": [
        (POOL, 14, "scalar", "GB0124", None, "steps = int(lengths.max().item())"),
    ],
    "tiny-mlp": [],
    "tiny-moe": [
        # a scalar break GM401 could rewrite, but Dynamo skips the rest of forward() anyway for the
        # nonzero break in the loop: not fixable (removing it only makes Dynamo skip all of forward())
        (MOE, 25, "scalar", "GB0124", None, "tau = temperature.clamp(min=0.05).item()"),
        # nonzero routing inside the loop over experts: the loop's frame is skipped too
        (MOE, 35, "dynamic-shape", "GB0036", None, "torch.nonzero(chosen == e, as_tuple=True)"),
        (MOE, 35, "skipped-frame", "GB7000", None, "torch.nonzero(chosen == e, as_tuple=True)"),
    ],
}
GRAPHS = {"tiny-encoder": 3, "tiny-decoder": 5, "tiny-pooler": 2, "tiny-mlp": 1, "tiny-moe": 5}
# target -> (module of its factory, dtype), for the independent graph count
FACTORIES = {"tiny-encoder": ("tools.graphmend_targets:tiny_encoder", "float16"),
             "tiny-decoder": ("tools.graphmend_targets:tiny_decoder", "float32"),
             "tiny-pooler": ("tools.graphmend_targets:tiny_pooler", "float32"),
             "tiny-mlp": ("tools.graphmend_targets:tiny_mlp", "float32"),
             "tiny-moe": ("src.tinymodels.moe:tiny_moe", "float32")}


def graphmend(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "graphmend", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def checked():
    proc = graphmend("check", "--format", "json", cwd=EXAMPLES)
    return proc, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """``graphmend fix`` on a copy of the examples, run once: the tests below assert on its
    report, its rewritten files and what they compute."""
    root = tmp_path_factory.mktemp("fixed") / "examples"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("__pycache__"))
    proc = graphmend("fix", "--format", "json", cwd=root)
    return root, json.loads(proc.stdout)


def test_hand_count(checked):
    proc, report = checked
    assert proc.returncode == 1, proc.stderr  # breaks found
    found = {
        t["name"]: [(b["file"], b["line"], b["category"], b["gb_id"], b["rule"]) for b in t["breaks"]]
        for t in report["targets"]
    }
    assert found == {name: [row[:5] for row in rows] for name, rows in HAND_COUNT.items()}
    for t in report["targets"]:
        assert t["error"] is None
        for b, row in zip(t["breaks"], HAND_COUNT[t["name"]]):
            assert row[5] in b["source_line"]
            assert b["verified"] and not b["outside_paths"] and b["fixable"] == (row[4] is not None)
    # nothing of the clean module, ever
    assert not [b for b in report["static"] if b["file"] == CLEAN]


def test_totals_agree_with_a_counting_backend(checked):
    """Break counts are the distinct findings; graph counts match a counting backend run here, and
    recompilation counts match Dynamo's own `recompiles` log (tiny-moe: `dispatch` and its resume
    function are compiled again for the second expert)."""
    from graphmend.config import load_config

    assert {t.name: (t.entry, t.dtype) for t in load_config(EXAMPLES).targets} == FACTORIES
    _, report = checked
    for t in report["targets"]:
        assert t["break_count"] == len(t["breaks"])
        assert t["skipped_frames"] == sum(b["category"] == "skipped-frame" for b in t["breaks"])
        assert t["graph_count"] == GRAPHS[t["name"]], t["name"]
    code = (
        "import importlib, json, sys, torch, torch._dynamo\n"
        "sys.path.insert(0, '.')\n"
        "out = {}\n"
        f"for name, (entry, dtype) in {FACTORIES!r}.items():\n"
        "    module, _, attr = entry.partition(':')\n"
        "    torch._dynamo.reset()\n"
        "    built = getattr(importlib.import_module(module), attr)(dtype=getattr(torch, dtype))\n"
        "    graphs = []\n"
        "    fn = torch.compile(built[0], backend=lambda gm, ex: graphs.append(gm) or gm.forward)\n"
        "    print('@@', name, file=sys.stderr, flush=True)\n"
        "    with torch.no_grad():\n"
        "        fn(*built[1], **(built[2] if len(built) > 2 else {}))\n"
        "    sys.stderr.flush()\n"
        "    out[name] = len(graphs)\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLES, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1", TORCH_LOGS="recompiles"))
    assert proc.returncode == 0, proc.stderr
    counted = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counted == {t["name"]: t["graph_count"] for t in report["targets"]}
    logged = {part.split("\n", 1)[0].strip(): part.count("Recompiling function") for part in proc.stderr.split("@@ ")[1:]}
    assert logged == {t["name"]: t["recompiles"] for t in report["targets"]}
    assert logged["tiny-moe"] == 2, proc.stderr


def test_output_follows_the_check_schema(checked):
    from graphmend import schemas

    _, report = checked
    schemas.validate("check", report)  # raises SchemaValidationError naming the bad place


def test_environment_is_recorded(checked):
    _, report = checked
    envs = {t["name"]: t["environment"] for t in report["targets"]}
    assert envs["tiny-encoder"]["dtype"] == "float16" and envs["tiny-decoder"]["dtype"] == "float32"
    assert all(e["torch_version"].startswith("2.13") and e["backend"] == "eager" and e["device"] == "cpu" for e in envs.values())


def test_static_finds_the_fixable_sites_without_running_anything():
    proc = graphmend("check", "--no-dynamic", "--format", "json", cwd=EXAMPLES)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["targets"] == []
    found = sorted((b["file"], b["line"], b["rule"]) for b in report["static"])
    fixable = sorted((f, line, rule) for rows in HAND_COUNT.values() for f, line, cat, _, rule, _ in rows
                     if rule and cat not in ("skipped-frame", "scalar"))
    assert found == fixable
    assert all(not b["verified"] for b in report["static"])


def test_every_label_is_a_promise(checked, fixed, tmp_path):
    """Every break `check` labels fixable is fixed by `fix`, and only those: nothing is taken back
    (tiny-moe's `.item()`, whose rewrite would make Dynamo skip all of forward() for the nonzero
    break in the loop, 5 -> 6 graphs, is labelled not fixable with that reason, and `fix` leaves it);
    every compile setting it advises was run on the target and helped, which a run with the setting
    in the config confirms."""
    _, report = checked
    _, fixed = fixed
    applied = {(f["file"], f["line"], f["rule"]) for f in fixed["applied"]}
    assert fixed["rolled_back"] == [] and fixed["withdrawn"] == [] and fixed["failed"] == [], fixed
    after = {t["name"]: t["breaks_after"] for t in fixed["targets"]}
    advised = []
    for t in report["targets"]:
        labelled = {(b["file"], b["line"], b["rule"]) for b in t["breaks"] if b["fixable"]}
        assert labelled <= applied, (t["name"], labelled - applied, fixed["declined"])
        # nothing labelled fixable is left, and everything not labelled fixable is
        assert after[t["name"]] == sum(not b["fixable"] for b in t["breaks"]), t["name"]
        for b in t["breaks"]:
            if not b["fixable"]:
                assert b["lever_reason"], b  # says why: a decline, or what a run showed
            if b["lever"] == "config":
                assert "tried on target " + t["name"] in b["lever_reason"], b
                advised.append((t["name"], b["lever_reason"].split("torch._dynamo.config.")[1].split(" ")[0], t["break_count"]))
    item = next(t for t in report["targets"] if t["name"] == "tiny-moe")["breaks"][0]
    assert "Dynamo runs forward() eagerly from here on anyway" in item["lever_reason"] and f"{MOE}:35" in item["lever_reason"]
    # the pooler's scalar feeds range(): both rules decline, and no setting is advised
    pooler = next(t for t in report["targets"] if t["name"] == "tiny-pooler")["breaks"][0]
    assert pooler["lever"] == "none" and "GM401 declined" in pooler["lever_reason"] and "GM501 declined" in pooler["lever_reason"]
    assert {(name, setting) for name, setting, _ in advised} == {("tiny-moe", "capture_dynamic_output_shape_ops")}
    # fix's own report agrees: what it declined is not left with that setting as its lever
    declined_levers = {(d["file"], d["line"]) for d in fixed["declined"] if d["rule"].startswith("GM5")}
    assert declined_levers == {(POOL, 14), (MOE, 25)}
    for b in fixed["remaining"]:
        if (b["file"], b["line"]) in declined_levers:
            assert b["lever"] == "none" and "GM501 declined" in b["lever_reason"], b
    for name, setting, before in set(advised):
        root = tmp_path / name  # the original code, not the fixed one
        shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("__pycache__"))
        config = (root / "graphmend.yml").read_text()
        (root / "graphmend.yml").write_text(config.replace("entry: src.tinymodels.moe:tiny_moe",
                                                           f"entry: src.tinymodels.moe:tiny_moe\n    dynamo_config: [{setting}]"))
        proc = graphmend("check", "--no-static", "--target", name, "--format", "json", cwd=root)
        run = json.loads(proc.stdout)["targets"][0]
        assert run["error"] is None and run["break_count"] < before, run
        # with the loop's break gone, Dynamo no longer skips forward(): the `.item()` is fixable now
        assert [(b["line"], b["fixable"], b["rule"]) for b in run["breaks"]] == [(25, True, "GM401")], run


# What the fixed examples compute, against the originals (run in a fresh process per tree).
COMPARE = r'''
import json, sys
from pathlib import Path
import torch
root = Path(sys.argv[1])
sys.path.insert(0, str(root))
from tools import graphmend_targets as t
import tinymodels
assert Path(tinymodels.__file__).resolve().is_relative_to(root.resolve())
out = {}
# encoder in fp16: an ordinary input, and weights that overflow (the clamp's taken path)
for overflow in (False, True):
    model, args = t.tiny_encoder(dtype=torch.float16)
    if overflow:
        with torch.no_grad():
            model.layers[0].fc2.weight.mul_(5000.0)
    with torch.no_grad():
        out[f"encoder/{overflow}"] = model(*args).float().tolist()
# decoder: 12 positions take the long-context table, 4 positions the short one
for n in (12, 4):
    model, args, kwargs = t.tiny_decoder()
    ids, pos = args[0][:, :n], args[1][:, :n]
    with torch.no_grad():
        out[f"decoder/{n}"] = model(ids, pos, **kwargs).float().tolist()
print(json.dumps(out))
'''


def test_data_dependent_breaks_gone_and_outputs_equal(fixed):
    """After ``fix`` the data-dependent-branch breaks are gone and the models compute what they
    computed before, on both outcomes of each branch."""
    root, data = fixed
    validate("fix", data)
    before = [b for b in data["found"] if b["rule"] == "GM101"]
    after = [b for b in data["remaining"] if b["rule"] == "GM101"]
    assert len(before) == 3 and after == [], after  # the clamp (+ its skipped frame) and the rotary switch
    assert {f["rule"] for f in data["applied"]} >= {"GM101"}
    outputs = {}
    for which, where in (("fixed", root), ("original", EXAMPLES)):
        done = subprocess.run([sys.executable, "-c", COMPARE, str(where)], capture_output=True, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs[which] = json.loads(done.stdout.strip().splitlines()[-1])
    import torch

    for key, want in outputs["original"].items():
        torch.testing.assert_close(torch.tensor(outputs["fixed"][key]), torch.tensor(want), rtol=0, atol=0,
                                   equal_nan=True, msg=key)
    encoder = (root / "src/tinymodels/encoder.py").read_text()
    assert "torch.isinf(h).any() | torch.isnan(h).any()" in encoder
