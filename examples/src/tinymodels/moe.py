"""A mixture-of-experts router: every token goes to its top-2 experts, with a learned temperature.

Two kinds of break that real MoE models (Mixtral, Qwen2-MoE, Switch) hit under torch.compile:

* the router's temperature is read with ``.item()`` (GB0124) and only divides the gate logits:
  GM401 keeps it a 0-d tensor;
* each expert picks its tokens with ``torch.nonzero`` (GB0036, a data-dependent output shape):
  no source rewrite gives that a static shape; GM502 runs every call of the compiled model with
  ``capture_dynamic_output_shape_ops``. Inside the loop over experts the break also makes Dynamo
  give up on the loop's frame.
"""

import torch
from torch import nn


class TinyMoE(nn.Module):
    def __init__(self, hidden=16, num_experts=4, top_k=2):
        super().__init__()
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(num_experts))
        self.top_k = top_k

    def forward(self, h, temperature):
        tau = temperature.clamp(min=0.05).item()
        logits = self.gate(h)
        probs = (logits / tau).softmax(-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            out = out + self.dispatch(h, weights, chosen, e, expert)
        return out

    def dispatch(self, h, weights, chosen, e, expert):
        token_idx, slot = torch.nonzero(chosen == e, as_tuple=True)
        routed = expert(h[token_idx]) * weights[token_idx, slot, None]
        return torch.zeros_like(h).index_add(0, token_idx, routed)


def tiny_moe(dtype=torch.float32, device="cpu"):
    """The GraphMend target: (model, args)."""
    torch.manual_seed(0)
    model = TinyMoE().to(device=device, dtype=dtype).eval()
    h = torch.randn(6, 16, device=device, dtype=dtype)
    temperature = torch.tensor(0.7, device=device, dtype=dtype)
    return model, (h, temperature)
