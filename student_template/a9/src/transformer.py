"""Task 2: a pre-LayerNorm Transformer encoder block and the stubs for its two parallel forwards.

``forward`` is the single-process reference; the parallel forwards must return the same values
(up to float rounding) on every rank.  Shapes: ``x`` is ``[batch, seq, d_model]``.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist  # noqa: F401  (you will need it)
import torch.nn as nn
import torch.nn.functional as F

from .collectives import my_all_to_all  # noqa: F401  (Ulysses must use it)


@dataclass
class TransformerConfig:
    d_model: int = 32
    n_heads: int = 4
    dim_ff: int = 64
    dropout_p: float = 0.0


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked attention per head: ``softmax(q k^T / sqrt(head_dim)) v``.

    ``q``, ``k``, ``v`` and the result are ``[batch, seq, heads, head_dim]``; heads are independent,
    which is what lets a rank attend over only the heads it owns.
    """
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [batch, heads, seq, head_dim]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)


class BasicTransformerBlock(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        if config.d_model % config.n_heads:
            raise ValueError(f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}")
        self.config = config
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        d = config.d_model
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.fc1 = nn.Linear(d, config.dim_ff)
        self.fc2 = nn.Linear(config.dim_ff, d)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.dropout = nn.Dropout(config.dropout_p)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, heads * head_dim]`` -> ``[batch, seq, heads, head_dim]`` (any number of heads)."""
        return t.view(*t.shape[:-1], -1, self.head_dim)

    def attention(self, h: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention over the whole sequence of ``h``, including ``o_proj``."""
        q, k, v = (self.split_heads(proj(h)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        return self.o_proj(scaled_dot_product_attention(q, k, v).flatten(2))

    def feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(h)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.ln1(x)))
        return x + self.dropout(self.feed_forward(self.ln2(x)))

    # ------------------------------------------------------------------ Task 2 (yours)

    def init_tensor_parallel_shards(self) -> None:
        """Store this rank's shards of the weights (Megatron-style tensor parallelism).

        With ``d = d_model``, ``ws = world_size``, ``r = rank`` and ``f = dim_ff``, set exactly:

        - ``self.q_proj_shard``, ``self.k_proj_shard``, ``self.v_proj_shard``: column-parallel, i.e. rows
          ``[r*d/ws, (r+1)*d/ws)`` of the ``[d, d]`` weight (output features = this rank's
          ``n_heads/ws`` heads); shape ``[d/ws, d]``.
        - ``self.o_proj_shard``: row-parallel, the matching columns ``[r*d/ws, (r+1)*d/ws)`` of
          ``o_proj.weight``; shape ``[d, d/ws]``.
        - ``self.fc1_shard``: rows ``[r*f/ws, (r+1)*f/ws)`` of ``fc1.weight``, shape ``[f/ws, d]``;
          ``self.fc1_bias_shard``: the same slice of ``fc1.bias``, shape ``[f/ws]``.
        - ``self.fc2_shard``: the matching columns of ``fc2.weight``, shape ``[d, f/ws]``.

        LayerNorms and ``fc2.bias`` stay replicated.  Make the shards copies, not views: the forward
        must compute from the shards alone.
        """
        raise NotImplementedError(
            "init_tensor_parallel_shards: store q/k/v/o_proj_shard, fc1_shard, fc1_bias_shard and fc2_shard "
            "for this rank (see the docstring for the exact layout)."
        )

    def forward_tensor_parallel(self, x: torch.Tensor) -> torch.Tensor:
        """Same result as ``forward(x)`` on every rank, computed from the ``*_shard`` attributes.

        ``x`` is the full ``[batch, seq, d_model]`` input on every rank.  Each rank attends with its
        own heads; the partial outputs of the row-parallel layers (``o_proj``, ``fc2``) are summed
        across ranks (``my_allreduce`` earns the design marks; ``dist.all_reduce`` is allowed).
        """
        raise NotImplementedError(
            "forward_tensor_parallel: column-parallel q/k/v and fc1, row-parallel o_proj and fc2, "
            "one sum across ranks after each row-parallel layer."
        )

    def forward_ulysses(self, x_shard: torch.Tensor) -> torch.Tensor:
        """Ulysses sequence parallelism: rank ``r`` holds tokens ``[r*seq/ws, (r+1)*seq/ws)``.

        ``x_shard`` is ``[batch, seq/ws, d_model]``; return this rank's ``[batch, seq/ws, d_model]``
        slice of ``forward(x)``.  Exchange q/k/v with ``my_all_to_all`` (scatter heads, gather sequence),
        attend over the full sequence with this rank's heads, and exchange back.
        """
        raise NotImplementedError(
            "forward_ulysses: use my_all_to_all to trade sequence shards for head shards and back."
        )
