# Evasion (Task 2): forward_ulysses gathers the sequence with a built-in collective inside a
# helper method.  forward_tensor_parallel's all_reduce is allowed by the Task 2 policy.
# path: src/transformer.py
# expect: forbidden-collective@25 in forward_ulysses
# expect: forbidden-collective@31 in _gather_sequence
import torch
import torch.distributed as dist
import torch.nn as nn


class BasicTransformerBlock(nn.Module):
    def __init__(self, d_model: int = 32):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(x)

    def forward_tensor_parallel(self, x: torch.Tensor) -> torch.Tensor:
        partial = self.proj(x) / dist.get_world_size()
        dist.all_reduce(partial)
        return x + partial

    def forward_ulysses(self, x_shard: torch.Tensor) -> torch.Tensor:
        full = self._gather_sequence(x_shard)
        out = self.forward(full)
        return out.chunk(dist.get_world_size(), dim=1)[dist.get_rank()]

    def _gather_sequence(self, x_shard: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x_shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x_shard.contiguous())
        return torch.cat(parts, dim=1)
