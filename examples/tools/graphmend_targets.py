"""GraphMend targets of the demo repository: each returns (model, args[, kwargs])."""

import sys
from pathlib import Path

import torch

# src/ layout: make the package importable when GraphMend imports this module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tinymodels.clean import MLP  # noqa: E402
from tinymodels.decoder import Decoder  # noqa: E402
from tinymodels.encoder import Encoder  # noqa: E402
from tinymodels.pooling import StepPooler  # noqa: E402


def tiny_encoder(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = Encoder().to(device=device, dtype=dtype).eval()
    input_ids = torch.randint(0, 64, (2, 6), device=device)
    attention_mask = torch.ones(2, 6, dtype=torch.long, device=device)
    return model, (input_ids, attention_mask)


def tiny_decoder(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = Decoder().to(device=device, dtype=dtype).eval()
    input_ids = torch.randint(0, 64, (1, 12), device=device)
    position_ids = torch.arange(12, device=device)[None, :]
    return model, (input_ids, position_ids), {"use_cache": True}


def tiny_pooler(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = StepPooler().to(device=device, dtype=dtype).eval()
    h = torch.randn(2, 5, 16, device=device, dtype=dtype)
    lengths = torch.tensor([3, 4], device=device)
    return model, (h, lengths)


def tiny_mlp(dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    model = MLP().to(device=device, dtype=dtype).eval()
    return model, (torch.randn(2, 16, device=device, dtype=dtype),)
