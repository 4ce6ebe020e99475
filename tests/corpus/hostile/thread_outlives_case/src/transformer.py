"""Task 2: a pre-LayerNorm Transformer encoder block, tensor-parallel and Ulysses forwards.

``forward`` is the single-process reference; the parallel forwards must return the same values
(up to float rounding) on every rank.  Shapes: ``x`` is ``[batch, seq, d_model]``.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .collectives import my_all_to_all, my_allreduce


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

    # ------------------------------------------------------------------ Task 2

    @staticmethod
    def _my_block(size: int) -> slice:
        """This rank's contiguous block ``[r*size/ws, (r+1)*size/ws)`` of a dimension."""
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if size % world_size:
            raise ValueError(f"a dimension of size {size} cannot be split over {world_size} ranks")
        return slice(rank * size // world_size, (rank + 1) * size // world_size)

    def init_tensor_parallel_shards(self) -> None:
        """Megatron layout: rank r owns heads ``[r*H/ws, (r+1)*H/ws)`` and hidden units
        ``[r*f/ws, (r+1)*f/ws)``.

        Column-parallel q/k/v/fc1 keep the rows that produce those features; row-parallel o_proj/fc2
        keep the columns that consume them.  Copies, not views, so the forward depends only on them.
        """
        if self.n_heads % dist.get_world_size():
            raise ValueError(f"n_heads={self.n_heads} cannot be split over {dist.get_world_size()} ranks")
        heads, hidden = self._my_block(self.config.d_model), self._my_block(self.config.dim_ff)

        def copy(t: torch.Tensor) -> torch.Tensor:
            return t.detach().clone(memory_format=torch.contiguous_format)

        self.q_proj_shard = copy(self.q_proj.weight[heads])
        self.k_proj_shard = copy(self.k_proj.weight[heads])
        self.v_proj_shard = copy(self.v_proj.weight[heads])
        self.o_proj_shard = copy(self.o_proj.weight[:, heads])
        self.fc1_shard = copy(self.fc1.weight[hidden])
        self.fc1_bias_shard = copy(self.fc1.bias[hidden])
        self.fc2_shard = copy(self.fc2.weight[:, hidden])

    def forward_tensor_parallel(self, x: torch.Tensor) -> torch.Tensor:
        """Each row-parallel layer yields a partial sum; one ``my_allreduce`` after each completes it.

        LayerNorms are replicated (every rank holds the full activations between the two sums), and
        ``fc2.bias`` is added once, after the sum, so it is not counted ``world_size`` times.
        """
        h = self.ln1(x)
        shards = (self.q_proj_shard, self.k_proj_shard, self.v_proj_shard)
        q, k, v = (self.split_heads(F.linear(h, shard)) for shard in shards)  # this rank's heads
        attn_partial = F.linear(scaled_dot_product_attention(q, k, v).flatten(2), self.o_proj_shard)
        x = x + self.dropout(my_allreduce(attn_partial))
        hidden = F.relu(F.linear(self.ln2(x), self.fc1_shard, self.fc1_bias_shard))
        ffn_partial = F.linear(hidden, self.fc2_shard)
        return x + self.dropout(my_allreduce(ffn_partial) + self.fc2.bias)

    def forward_ulysses(self, x_shard: torch.Tensor) -> torch.Tensor:
        """Everything but attention is per token, so it runs on the local sequence shard.

        Attention needs every token: one all-to-all trades [sequence shard, all heads] of q, k and v
        (stacked, so one message per peer) for [full sequence, this rank's heads]; a second one
        trades the attention output back.
        """
        h = self.ln1(x_shard)
        qkv = torch.stack([self.split_heads(proj(h)) for proj in (self.q_proj, self.k_proj, self.v_proj)])
        # [3, batch, seq/ws, heads, head_dim] -> [3, batch, seq, heads/ws, head_dim]
        q, k, v = my_all_to_all(qkv, scatter_dim=3, gather_dim=2)
        attn = my_all_to_all(scaled_dot_product_attention(q, k, v), scatter_dim=1, gather_dim=2)
        x = x_shard + self.dropout(self.o_proj(attn.flatten(2)))
        return x + self.dropout(self.feed_forward(self.ln2(x)))
