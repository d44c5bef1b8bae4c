"""A decoder with rotary embeddings, a one-time warning and a forgotten debug print."""

import torch
from torch import nn

from tinymodels.logging_utils import get_logger

logger = get_logger(__name__)


class RotaryEmbedding(nn.Module):
    """Long-context rotary frequencies: a second table beyond the original context length."""

    def __init__(self, dim=16, original_max_position=8):
        super().__init__()
        self.original_max_position = original_max_position
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("short_inv_freq", inv_freq, persistent=False)
        self.register_buffer("long_inv_freq", inv_freq / 4.0, persistent=False)

    def forward(self, x, position_ids):
        seq_len = position_ids.max() + 1
        if seq_len > self.original_max_position:
            inv_freq = self.long_inv_freq
        else:
            inv_freq = self.short_inv_freq
        freqs = position_ids[..., None].to(x.dtype) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Decoder(nn.Module):
    def __init__(self, vocab=64, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rotary = RotaryEmbedding(hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, input_ids, position_ids, use_cache=True):
        if use_cache:
            logger.warning_once("use_cache=True is not supported by this decoder; ignoring it")
        h = self.embed(input_ids)
        cos, sin = self.rotary(h, position_ids)
        h = h * cos + self.proj(h) * sin
        print("decoder hidden", h.shape)
        return self.lm_head(h)
