"""The grader's own copy of the course's ``BasicTransformerBlock``, as pure functions of a weight dict.

Expected Task 2 outputs come from here, never from the student's ``forward``: a student who
changes ``forward`` cannot move the target.  The architecture is the starter's: pre-LayerNorm,
unmasked multi-head attention with bias-free projections, ReLU feed-forward with biases.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Weights = dict[str, torch.Tensor]


def random_weights(d_model: int, dim_ff: int, gen: torch.Generator) -> Weights:
    """A state dict for the block, keyed exactly like ``BasicTransformerBlock.state_dict()``."""

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    return {
        "q_proj.weight": randn(d_model, d_model, scale=d_model**-0.5),
        "k_proj.weight": randn(d_model, d_model, scale=d_model**-0.5),
        "v_proj.weight": randn(d_model, d_model, scale=d_model**-0.5),
        "o_proj.weight": randn(d_model, d_model, scale=d_model**-0.5),
        "fc1.weight": randn(dim_ff, d_model, scale=d_model**-0.5),
        "fc1.bias": randn(dim_ff, scale=0.1),
        "fc2.weight": randn(d_model, dim_ff, scale=dim_ff**-0.5),
        "fc2.bias": randn(d_model, scale=0.1),
        "ln1.weight": 1 + randn(d_model, scale=0.1),
        "ln1.bias": randn(d_model, scale=0.1),
        "ln2.weight": 1 + randn(d_model, scale=0.1),
        "ln2.bias": randn(d_model, scale=0.1),
    }


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, s, d = q.shape
    hd = d // n_heads

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(b, -1, n_heads, hd).transpose(1, 2)

    scores = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(hd)
    out = scores.softmax(dim=-1) @ heads(v)
    return out.transpose(1, 2).reshape(b, s, d)


def forward(w: Weights, x: torch.Tensor, n_heads: int) -> torch.Tensor:
    d = x.shape[-1]
    h = F.layer_norm(x, (d,), w["ln1.weight"], w["ln1.bias"])
    attn = attention(h @ w["q_proj.weight"].T, h @ w["k_proj.weight"].T, h @ w["v_proj.weight"].T, n_heads)
    x = x + attn @ w["o_proj.weight"].T
    h = F.layer_norm(x, (d,), w["ln2.weight"], w["ln2.bias"])
    return x + F.relu(h @ w["fc1.weight"].T + w["fc1.bias"]) @ w["fc2.weight"].T + w["fc2.bias"]


def shards(w: Weights, rank: int, world_size: int) -> Weights:
    """Megatron shards of rank ``rank``: column-parallel = rows of the weight, row-parallel = columns."""

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.chunk(world_size, dim=0)[rank]

    def cols(t: torch.Tensor) -> torch.Tensor:
        return t.chunk(world_size, dim=1)[rank]

    return {
        "q_proj_shard": rows(w["q_proj.weight"]),
        "k_proj_shard": rows(w["k_proj.weight"]),
        "v_proj_shard": rows(w["v_proj.weight"]),
        "o_proj_shard": cols(w["o_proj.weight"]),
        "fc1_shard": rows(w["fc1.weight"]),
        "fc1_bias_shard": rows(w["fc1.bias"]),
        "fc2_shard": cols(w["fc2.weight"]),
    }
