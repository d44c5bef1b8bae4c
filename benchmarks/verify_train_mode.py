"""A real library's train-mode target through ``verify`` (not a test): a tiny BERT from
transformers (random weights from its config, dropout on), behind a head with a data-dependent
branch.

1. identical trees: ``verify`` says "no source change" and runs nothing;
2. the branch predicated as GM101 does it (a real rewrite): ``verify`` runs both trees, like
   with like, and names what the original itself does (with ``inductor`` its dropout draws other
   numbers under torch.compile than eagerly), judging the rewrite against that.

    python benchmarks/verify_train_mode.py [--backend inductor] [--noise]

``--noise`` adds the OS-seeded re-initialisation the test ``tests/verify/test_train_mode_transformers.py``
uses (two eager runs of the original then differ too). Prints verify's text report for each step.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from tests.verify.test_train_mode_transformers import BRANCH, MODEL, PREDICATED, TARGETS  # noqa: E402

NOISE = '''\
        # Units are re-initialised at random, from a generator the OS seeds.
        g = torch.Generator()
        g.seed()
        h = h + torch.rand(h.shape, generator=g) * 1e-3
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--noise", action="store_true", help="keep the OS-seeded re-initialisation")
    args = parser.parse_args()
    from graphmend.config import load_config
    from graphmend.report.markdown_verify import render_verify_text
    from graphmend.verify import verify

    assert NOISE in MODEL
    model = MODEL if args.noise else MODEL.replace(NOISE, "")
    config_text = ("paths: [pkg/]\ntargets:\n  - {name: tagger, entry: 'tools.targets:tagger', device: cpu, "
                   f"backend: {args.backend}, mode: train}}\n")
    with tempfile.TemporaryDirectory(prefix="graphmend-train-mode-") as tmp:
        root = Path(tmp)
        for rel, text in {"pkg/__init__.py": "", "pkg/model.py": model, "tools/__init__.py": "", "tools/targets.py": TARGETS,
                          "graphmend.yml": config_text}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "x"]):
            subprocess.run(["git", *cmd], cwd=root, check=True)
        config = load_config(root)
        for step, text in (("identical trees", model), ("GM101's rewrite", model.replace(BRANCH, PREDICATED))):
            (root / "pkg/model.py").write_text(text)
            started = time.monotonic()
            report = verify(config, count_breaks=False)
            print(f"== {step} ({time.monotonic() - started:.0f} s)")
            print(render_verify_text(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
