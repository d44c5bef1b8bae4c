"""Real code nobody here wrote: transformers 4.52.4 models, built tiny from their configs.

The installed ``transformers`` package is copied into a temporary repository as its own
source (``src/transformers``), as the library's maintainers would run GraphMend: findings are
repo-relative paths inside transformers' source, and they agree with Dynamo's own
``graph_breaks`` log for the same run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import transformers

from graphmend.config import load_config
from graphmend.detect.dynamic import result_from_data
from graphmend.model import Category, to_dict
from graphmend.runner import Job
from graphmend.runner.subprocess import SubprocessRunner


# one worker runs this module: its module-scoped fixture runs the targets once
pytestmark = [pytest.mark.xdist_group("test_transformers_detect"), pytest.mark.slow]


TARGETS = '''\
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import transformers  # noqa: E402

assert Path(transformers.__file__).resolve().is_relative_to(Path(__file__).resolve().parents[1]), transformers.__file__

SEQ = dict(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)


def tiny_bart(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = transformers.BartModel(transformers.BartConfig(max_position_embeddings=32, **SEQ))
    ids = torch.randint(3, 64, (1, 8), device=device)
    return model.to(device=device, dtype=dtype).eval(), (), {"input_ids": ids, "decoder_input_ids": ids}


def tiny_t5(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2)
    ids = torch.randint(0, 64, (1, 8), device=device)
    return transformers.T5Model(config).to(device=device, dtype=dtype).eval(), (), {"input_ids": ids, "decoder_input_ids": ids}


def tiny_whisper(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    config = transformers.WhisperConfig(num_mel_bins=8, max_source_positions=8, max_target_positions=16, pad_token_id=0,
                                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **SEQ)
    features = torch.randn(1, 8, 16, device=device, dtype=dtype)
    ids = torch.tensor([[1, 5, 6, 7]], device=device)
    model = transformers.WhisperModel(config).to(device=device, dtype=dtype).eval()
    return model, (), {"input_features": features, "decoder_input_ids": ids}
'''

CONFIG = '''\
paths: [src/]
targets:
  - {name: tiny-bart, entry: "tools.graphmend_targets:tiny_bart", device: cpu, dtype: float16, backend: eager}
  - {name: tiny-t5, entry: "tools.graphmend_targets:tiny_t5", device: cpu, backend: eager}
  - {name: tiny-whisper, entry: "tools.graphmend_targets:tiny_whisper", device: cpu, backend: eager}
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    assert transformers.__version__ == "4.52.4"
    root = tmp_path_factory.mktemp("hf")
    shutil.copytree(Path(transformers.__file__).parent, root / "src" / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tools").mkdir()
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "graphmend_targets.py").write_text(TARGETS)
    (root / "graphmend.yml").write_text(CONFIG)
    return root


@pytest.fixture(scope="module")
def runs(repo):
    config = load_config(repo)
    out = {}
    for target in config.targets:
        outcome = SubprocessRunner().run(Job(task="detect", root=repo, timeout_s=300,
                                             payload={"target": to_dict(target), "capture_log": True}))
        assert outcome.ok, outcome.error
        out[target.name] = (result_from_data(target.name, outcome.data, config, repo), outcome.data["dynamo_log"])
    return out


def rows(result):
    return [(b.file, b.category, b.gb_id, b.rule, b.source_line) for b in result.breaks]


def test_bart_fp16(runs, repo):
    result, _ = runs["tiny-bart"]
    f = "src/transformers/models/bart/modeling_bart.py"
    assert rows(result) == [
        (f, Category.DATA_DEPENDENT_BRANCH, "GB0170", "GM101", "if hidden_states.dtype == torch.float16 and ("),
        # the encoder loops over its layers: the clamp's break makes Dynamo skip that frame
        (f, Category.SKIPPED_FRAME, "GB7000", "GM101", "if hidden_states.dtype == torch.float16 and ("),
        (f, Category.SIDE_EFFECT, "GB0291", "GM202", "logger.warning_once("),
    ]
    assert [b.function for b in result.breaks] == ["BartEncoderLayer.forward", "BartEncoderLayer.forward", "BartDecoder.forward"]
    assert "skipped the frame forward()" in result.breaks[1].reason
    assert result.skipped_frames == 1 and result.graph_count >= 3


@pytest.mark.parametrize("name, model, function", [("tiny-t5", "t5", "T5Stack.forward"),
                                                   ("tiny-whisper", "whisper", "WhisperDecoder.forward")])
def test_t5_and_whisper(runs, name, model, function):
    result, _ = runs[name]
    assert rows(result) == [(f"src/transformers/models/{model}/modeling_{model}.py", Category.SIDE_EFFECT, "GB0291",
                             "GM202", "logger.warning_once(")]
    assert result.breaks[0].function == function and result.breaks[0].hits >= 1


@pytest.mark.parametrize("name", ["tiny-bart", "tiny-t5", "tiny-whisper"])
def test_sites_are_inside_transformers_source_and_agree_with_dynamos_log(runs, repo, name):
    result, log = runs[name]
    assert result.error is None and result.breaks
    for b in result.breaks:
        text = (repo / b.file).read_text().splitlines()
        assert b.file.startswith("src/transformers/") and not b.outside_paths and b.verified
        assert text[b.line - 1].strip() == b.source_line
    logged = set()
    for message in log:
        found = re.search(r"in user code at (\S+):(\d+)", message)
        if found:
            logged.add((Path(found.group(1)).resolve().relative_to(repo.resolve()).as_posix(), int(found.group(2))))
    assert logged and logged == {(b.stack[-1].file, b.stack[-1].line) for b in result.breaks}
