"""``graphmend init``: a commented ``graphmend.yml`` and a targets module to start from.

``paths`` is what the repository holds, never a guess: a ``src/`` layout when there is one, else
the top-level packages (folders with an ``__init__.py``), else the ``.py`` files at the root.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from graphmend import fsutil
from graphmend.commands import UsageError
from graphmend.config import parse_config

CONFIG_TEMPLATE = """\
# GraphMend configuration. Reference: the README's "Configuration" section.

# What may be rewritten. Files outside are reported, never edited.
paths: [{paths}]{found}
exclude: ["**/tests/**"]

# Each target builds a model (tiny sizes and random weights are enough) and example inputs.
# Dynamo runs on it to find the real graph breaks; verify and bench run it before and after a fix.
targets:
  - name: {name}
    entry: {module}:{factory}   # returns (callable, args) or (callable, args, kwargs)
    device: auto              # auto | cpu | cuda
    dtype: float32            # passed to the factory when it takes a `dtype` argument
    backend: inductor         # the torch.compile backend used by verify and bench
    rtol: null                # null: torch.testing defaults for the dtype
    atol: null
    inputs: null              # "pkg.mod:fn" returning [(args, kwargs), ...] that exercise every path
    batch_arg: null           # the factory argument that sets the batch size (throughput)
    mode: eval                # eval | train
    timeout_s: null           # seconds one run of this target may take; null: sandbox.timeout_s

sandbox:
  runner: subprocess          # subprocess | docker (then set image:)
  image: null
  timeout_s: 900
  memory: 16g

fix:
  safety: safe                # safe | unsafe: the lowest safety level applied or suggested
  select: [GM]                # rule-code prefixes
  ignore: []

gate:
  fail_on: new-breaks         # new-breaks | any-break | never
  baseline: graphmend-baseline.json

bench:
  warmup: 3
  repeat: 20
  batch_sizes: [1]

review:
  suggestions: true
  comment: on-change          # on-change | always | never
"""

TARGETS_TEMPLATE = '''\
"""Targets for GraphMend: each factory returns (model, args) or (model, args, kwargs).

Build models from configs with small sizes; weights do not matter, only the code paths do.
GraphMend passes `dtype` and `device` to a factory that accepts them.
"""

import torch


def {factory}(dtype=torch.float32, device="cpu"):
    # Replace with your model, e.g. MyModel(MyConfig(hidden_size=32, num_layers=2)).
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to(device=device, dtype=dtype)
    x = torch.randn(2, 16, device=device, dtype=dtype)
    return model, (x,)
'''


# Top-level folders that are packages but not code to rewrite (tests are excluded anyway).
_NOT_SOURCE = {"tests", "test", "docs", "doc", "examples", "benchmarks", "scripts", "build", "dist"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src", action="append", metavar="PATH",
                        help="a folder or file GraphMend may rewrite (repeatable; default: found in the repository: "
                             "src/ when it exists, else the top-level packages, else the .py files at the root)")
    parser.add_argument("--targets-module", default="tools.graphmend_targets", help="module for the target factories")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")


def find_source_paths(root: Path, skip: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """What ``paths`` should hold for the repository at ``root``, and how it was found."""
    def visible(p: Path) -> bool:
        return not p.name.startswith((".", "_")) and p.name not in skip

    src = root / "src"
    if src.is_dir() and any(src.rglob("*.py")):
        return ["src/"], "a src/ layout"
    packages = sorted(p.name + "/" for p in root.iterdir()
                      if p.is_dir() and visible(p) and p.name not in _NOT_SOURCE and (p / "__init__.py").is_file())
    if packages:
        return packages, "the top-level packages"
    modules = sorted(p.name for p in root.glob("*.py")
                     if p.is_file() and visible(p) and p.name not in ("setup.py", "conftest.py", "noxfile.py"))
    if modules:
        return modules, "the .py files at the root"
    return ["."], "no Python code yet: the whole repository"


def run(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve()
    module = args.targets_module
    if not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"--targets-module: {module!r} is not a dotted module name")
    config_path = root / "graphmend.yml"
    targets_path = root.joinpath(*module.split(".")).with_suffix(".py")
    existing = [p for p in (config_path, targets_path) if p.exists()]
    if existing and not args.force:
        names = ", ".join(str(p.relative_to(root)) for p in existing)
        raise UsageError(f"{names} exist already; use --force to overwrite")
    if args.src:
        paths, how = list(args.src), "--src"
    else:
        # The targets module's package is GraphMend's harness, not code to rewrite.
        paths, how = find_source_paths(root, skip=(module.split(".")[0],))
    found = f"  # {how}" if how != "--src" else ""
    text = CONFIG_TEMPLATE.format(paths=", ".join(json.dumps(p) for p in paths), found=found,
                                  name="my-model", module=module, factory="my_model")
    # What we write must load: a template that fails its own validation would be a bug.
    parse_config(yaml.safe_load(text), root=root, shown="graphmend.yml")
    fsutil.write_text(config_path, text)
    targets_path.parent.mkdir(parents=True, exist_ok=True)
    for parent in targets_path.relative_to(root).parents:
        if str(parent) != "." and not (root / parent / "__init__.py").exists():
            fsutil.write_text(root / parent / "__init__.py", "")
    fsutil.write_text(targets_path, TARGETS_TEMPLATE.format(factory="my_model"))
    print(f"wrote {config_path.relative_to(root)} and {targets_path.relative_to(root)}")
    print(f"paths: {', '.join(paths)} ({how})")
    print("next: edit the target factory, then run `graphmend check`")
    return 0
